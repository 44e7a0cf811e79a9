// provides: optimizer choice, checkpoint/resume for every rank, and the --nproc-per-node relaunch.
#include "05_ddp/trainer.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <chrono>
#include <set>
#include <thread>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "05_ddp/sgd.h"
#include "common/state/checkpoint.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/observe/flight_recorder.h"
#include "common/observe/trace.h"
#include "common/basics/log.h"
#include "common/basics/paths.h"

namespace ddp {
namespace {

torch::Tensor encode_buckets(const std::vector<std::vector<size_t>>& buckets) {
  std::vector<int64_t> flat{static_cast<int64_t>(buckets.size())};
  for (const auto& b : buckets) {
    flat.push_back(static_cast<int64_t>(b.size()));
    flat.insert(flat.end(), b.begin(), b.end());
  }
  return torch::tensor(flat, torch::kInt64);
}

std::vector<std::vector<size_t>> decode_buckets(const torch::Tensor& t) {
  const auto v = t.to(torch::kInt64).contiguous();
  const int64_t* p = v.data_ptr<int64_t>();
  const int64_t n = v.numel();
  std::vector<std::vector<size_t>> buckets;
  int64_t at = 1;
  for (int64_t b = 0; n > 0 && b < p[0]; ++b) {
    if (at >= n || p[at] < 0 || at + 1 + p[at] > n) throw UsageError("the checkpoint's bucket layout is malformed");
    buckets.emplace_back(p + at + 1, p + at + 1 + p[at]);
    at += 1 + p[at];
  }
  if (n == 0 || at != n) throw UsageError("the checkpoint's bucket layout is malformed");
  return buckets;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_trainer_optimizer(const std::vector<torch::Tensor>& params,
                                                                const TrainerOptions& o) {
  if (o.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  }
  // LibTorch's SGD, stepping every parameter in one launch: Note [One launch for all parameters].
  return std::make_unique<ForeachSgd>(params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
}

namespace {

// What a checkpoint says about the run that wrote it (Note [Never lose a run]).
std::string optimizer_kind(const torch::optim::Optimizer& opt) {
  if (dynamic_cast<const torch::optim::AdamW*>(&opt)) return "adamw";
  if (dynamic_cast<const torch::optim::SGD*>(&opt)) return "sgd";
  return "unknown";
}

std::string shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t k = 0; k < t.dim(); ++k) s += (k ? ", " : "") + std::to_string(t.size(k));
  return s + "]";
}

// Throws (with the first difference) when the checkpoint `a` was written by another run: its
// model class, optimizer, parameter names or shapes differ from this run's.
void check_same_run(torch::serialize::InputArchive& a, torch::nn::Module& model, const torch::optim::Optimizer& opt) {
  c10::IValue v;
  if (a.try_read("run.model", v) && v.toStringRef() != model.name()) {
    throw UsageError("it holds a " + v.toStringRef() + ", this run builds a " + model.name() + " (--model)");
  }
  if (a.try_read("run.optimizer", v) && v.toStringRef() != optimizer_kind(opt)) {
    throw UsageError("it was trained with --optimizer " + v.toStringRef() + ", this run uses " + optimizer_kind(opt));
  }
  std::set<std::string> ours;
  for (auto& p : model.named_parameters()) {
    ours.insert("model." + p.key());
    torch::Tensor t;
    if (!a.try_read("model." + p.key(), t)) throw UsageError("it has no parameter " + p.key() + " (another --model?)");
    if (!t.sizes().equals(p.value().sizes())) {
      throw UsageError("parameter " + p.key() + " is " + shape(t) + " there and " + shape(p.value()) + " here");
    }
  }
  for (const auto& key : a.keys()) {
    if (key.rfind("model.", 0) == 0 && !ours.count(key)) throw UsageError("it has a parameter " + key.substr(6) + " that this model lacks");
  }
}

}  // namespace

int64_t count_parameters(const std::vector<torch::Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

void checkpoint(const std::string& dir, int64_t step, const SamplerState& sampler, int keep, torch::nn::Module& model,
                torch::optim::Optimizer& opt, const DistributedDataParallel& ddp, Group& group) {
  if (group.rank() == 0) {
    const std::string path = save_checkpoint(dir, step, keep, [&](torch::serialize::OutputArchive& a) {
      for (const auto& p : model.named_parameters()) a.write("model." + p.key(), p.value());
      for (const auto& b : model.named_buffers()) a.write("buffer." + b.key(), b.value(), /*is_buffer=*/true);
      torch::serialize::OutputArchive optimizer_state;
      opt.save(optimizer_state);
      a.write("optimizer", optimizer_state);
      a.write("run.model", c10::IValue(model.name()));  // Note [Never lose a run]
      a.write("run.optimizer", c10::IValue(optimizer_kind(opt)));
      a.write("step", torch::tensor(static_cast<int64_t>(step)));
      a.write("epoch", torch::tensor(static_cast<int64_t>(step / sampler.steps_per_epoch)));
      a.write("sampler.seed", torch::tensor(static_cast<int64_t>(sampler.seed)));
      a.write("sampler.steps_per_epoch", torch::tensor(sampler.steps_per_epoch));
      a.write("sampler.global_batch", torch::tensor(sampler.global_batch));
      a.write("sampler.world", torch::tensor(sampler.world));
      // Nothing in this trainer draws from it after the start, but a model with dropout would:
      // resuming must continue its random stream, not restart it.
      a.write("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
      // The rebuilt buckets, flattened as [count, size, indices..., size, indices...]: a resumed
      // run must sum in the same layout (Note [Rebuilding the buckets]).
      if (ddp.rebuilt()) a.write("ddp.buckets", encode_buckets(ddp.bucket_assignment()));
    });
    log("checkpoint written: " + path);
  }
  run(group, "barrier", "checkpoint", 0, [&] { return group.pg->barrier(); });
}

// Note [Resuming at another world size]
// DistributedSampler gives rank r the indices r, r+W, r+2W, ... of the epoch's (padded)
// permutation, and each rank takes them b at a time: global step k therefore consumes the block
// of G = W·b·accumulation indices starting at k·G, whatever W is. A checkpoint's step is a
// position in the data that any world size reaches, as long as G (and so the steps per epoch)
// stays the same: 2 ranks of 32 and 4 ranks of 16 see the same 64 images at step k. What
// differs is the order of floating-point sums, and the padding of an epoch's last step. So a
// resume may change the world size but not the global batch: --global-batch keeps it fixed
// while the per-rank batch follows the world.
void check_same_data_position(const std::string& path, const SamplerState& saved, const SamplerState& now) {
  const auto g = [](const SamplerState& s) {
    return std::to_string(s.global_batch) + " (" + std::to_string(s.world) + " ranks x " +
           std::to_string(s.global_batch / std::max<int64_t>(1, s.world)) + " images per rank and step)";
  };
  if (saved.seed != now.seed) {
    throw UsageError(path + " was written by a run with --seed " + std::to_string(saved.seed) + ", this run has " +
                     std::to_string(now.seed) + ": resume with the same seed, or start over with --reset");
  }
  if (saved.global_batch != 0 && saved.global_batch != now.global_batch) {
    throw UsageError(path + " was written with a global batch of " + g(saved) + "; this run's is " + g(now) +
                     ". Its step would point to other samples: keep the global batch (--global-batch " +
                     std::to_string(saved.global_batch) + "), or start over with --reset");
  }
  if (saved.steps_per_epoch != now.steps_per_epoch) {
    throw UsageError(path + " was written by a run with " + std::to_string(saved.steps_per_epoch) + " steps per epoch; this run has " +
                     std::to_string(now.steps_per_epoch) +
                     " (world size, --batch-size, --grad-accum and the data decide it). Resume with the same settings, "
                     "or start over with --reset");
  }
  if (saved.world != 0 && saved.world != now.world) {
    log0("resuming a run of " + std::to_string(saved.world) + " ranks with " + std::to_string(now.world) +
         ": the same global batch of " + std::to_string(now.global_batch) + ", so every step meets the same samples "
         "(Note [Resuming at another world size])");
  }
}

int64_t resume(const std::string& dir, const torch::Device& device, const std::optional<SamplerState>& sampler,
               torch::nn::Module& model, torch::optim::Optimizer& opt, DistributedDataParallel& ddp, Group& group) {
  SamplerState saved;
  std::optional<std::vector<std::vector<size_t>>> buckets;
  if (group.rank() == 0) {  // rank 0 writes the checkpoints: a dead writer's leftovers are its own
    remove_stale_temporaries(dir);
  }
  auto loaded = load_latest_checkpoint(dir, device, [&](torch::serialize::InputArchive& a) {
    check_same_run(a, model, opt);  // an intact checkpoint of another run is refused, never skipped
    torch::NoGradGuard no_grad;
    // A fresh tensor per read: read() into a defined tensor re-points that tensor instead.
    auto read = [&](const std::string& key, bool is_buffer = false) {
      torch::Tensor t;
      a.read(key, t, is_buffer);
      return t;
    };
    for (auto& p : model.named_parameters()) p.value().copy_(read("model." + p.key()));
    for (auto& b : model.named_buffers()) b.value().copy_(read("buffer." + b.key(), /*is_buffer=*/true));
    torch::serialize::InputArchive optimizer_state;
    a.read("optimizer", optimizer_state);
    opt.load(optimizer_state);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(read("rng.cpu").cpu());
    saved.seed = static_cast<uint64_t>(read("sampler.seed").item<int64_t>());
    saved.steps_per_epoch = read("sampler.steps_per_epoch").item<int64_t>();
    torch::Tensor t;
    if (a.try_read("sampler.global_batch", t)) saved.global_batch = t.item<int64_t>();
    if (a.try_read("sampler.world", t)) saved.world = t.item<int64_t>();
    torch::Tensor flat;
    if (a.try_read("ddp.buckets", flat)) buckets = decode_buckets(flat.cpu());  // absent: written before the rebuild
  });
  if (buckets) ddp.restore_buckets(*buckets);
  if (loaded && sampler) check_same_data_position(loaded->path, saved, *sampler);
  const int64_t step = loaded ? loaded->step : 0;
  // Every rank must continue from the same step, or their collectives no longer pair up.
  std::vector<torch::Tensor> lo{torch::tensor({step}, torch::kInt64).to(device)}, hi{lo[0].clone()};
  c10d::AllreduceOptions min_op, max_op;
  min_op.reduceOp = c10d::ReduceOp::MIN;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  group.pg->allreduce(lo, min_op)->wait();
  group.pg->allreduce(hi, max_op)->wait();
  if (lo[0].item<int64_t>() != hi[0].item<int64_t>()) {
    throw std::runtime_error("ranks found different checkpoints in " + dir + " (steps " + std::to_string(lo[0].item<int64_t>()) +
                             " to " + std::to_string(hi[0].item<int64_t>()) +
                             "): the folder must be the same shared folder for every rank");
  }
  if (loaded) log0("resumed from " + loaded->path + " at step " + std::to_string(step) + " (--reset starts over)");
  return step;
}

void remove_checkpoints(const std::string& dir, Group& group) {
  if (group.rank() == 0) {
    const std::vector<std::string> old = list_checkpoints(dir);
    for (const auto& path : old) std::remove(path.c_str());
    remove_stale_temporaries(dir);
    if (!old.empty()) log("--reset: removed " + std::to_string(old.size()) + " checkpoint(s) of an earlier run from " + dir);
  }
  group.pg->barrier()->wait();
}

struct StopVote::State {
  Group& group;
  torch::Device device;
  std::vector<torch::Tensor> flag;  // on the device, all-reduced in place
  torch::Tensor host;               // a GPU's result, copied here (pinned) behind the all-reduce
  std::optional<Pending> pending;
  std::optional<c10::Event> copied;  // a GPU's: recorded after that copy
};

StopVote::StopVote(Group& group) : s_(std::make_unique<State>(State{group, device_for(group.info), {}, {}, {}, {}})) {
  if (s_->device.is_cuda()) s_->host = torch::zeros({1}, torch::TensorOptions(torch::kInt32).pinned_memory(true));
}

StopVote::~StopVote() {
  if (!s_->pending || std::uncaught_exceptions() > 0) return;  // on a failure the group aborts
  try {
    wait(s_->group, *s_->pending);
  } catch (const std::exception& e) {
    log("the last stop vote failed: " + short_what(e));
  }
}

bool StopVote::next(bool mine, bool post) {
  State& s = *s_;
  bool stop = false;
  if (s.pending) {
    if (s.device.is_cuda()) {
      while (!s.copied->query()) std::this_thread::yield();  // the previous step's vote: done long ago
      stop = s.host.item<int>() != 0;
    } else {
      wait(s.group, *s.pending);
      stop = s.flag[0].item<int>() != 0;
    }
    s.pending.reset();
  }
  if (stop || !post) return stop;
  // Filled where it lives: a CPU value copied to a GPU from pageable memory would make the host
  // wait for everything queued before it, a sync per step (measured: 2.5 ms a step on an H100).
  if (s.flag.empty()) s.flag = {torch::zeros({1}, torch::TensorOptions(torch::kInt32).device(s.device))};
  s.flag[0].fill_(mine ? 1 : 0);
  c10d::AllreduceOptions max_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  s.pending = issue(s.group, "all-reduce", "stop-flag", 4, [&] { return s.group.pg->allreduce(s.flag, max_op); });
  if (s.device.is_cuda()) {
    wait(s.group, *s.pending);  // NCCL: the current stream waits for the all-reduce; the host does not
    s.host.copy_(s.flag[0], /*non_blocking=*/true);
    c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    s.copied.emplace(c10::DeviceType::CUDA);
    s.copied->record(cuda.getStream(s.device));
  }
  return false;
}

int stop_for_requeue(Group& group, int64_t step, int sig) {
  // We are stopping anyway: the SIGTERM that follows a requeue must not cut this short.
  ::signal(SIGTERM, SIG_IGN);
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string restart = std::getenv("SLURM_RESTART_COUNT") ? std::getenv("SLURM_RESTART_COUNT") : "0";
  log0("preempted: " + signal_name(sig) + " received; stopped after step " + std::to_string(step) +
       " with its checkpoint written" +
       (job ? "; requeueing Slurm job " + std::string(job) + " (restart " + restart + ")"
            : "; not under Slurm, nothing to requeue: run the same command again to resume"));
  if (group.rank() == 0 && job) {
    requeue_slurm_job(job, group.info.timeout_s.value);
    log("Slurm job " + std::string(job) + " requeued: it resumes from step " + std::to_string(step) + " when it runs again");
  }
  return kExitPreempted;
}

int relaunch_with_02_spawn(int argc, char** argv, int nproc, const CommonFlags& flags, const TrainerOptions& o) {
  if (flags.rank) throw UsageError("--nproc-per-node starts the ranks itself: drop --rank");
  if (flags.world_size && *flags.world_size != nproc) {
    throw UsageError("--world-size " + std::to_string(*flags.world_size) + " differs from --nproc-per-node " +
                     std::to_string(nproc) + " (one machine: they are the same)");
  }
  const std::string self = this_program(), launcher = program_beside("02_spawn");
  if (::access(launcher.c_str(), X_OK) != 0) {
    throw UsageError("--nproc-per-node needs chapter 02's launcher at " + launcher +
                     " (build it), or start each rank yourself with --rank/--world-size");
  }
  std::vector<std::string> args{launcher, "--nproc-per-node", std::to_string(nproc)};
  if (flags.timeout_s) args.insert(args.end(), {"--timeout", std::to_string(*flags.timeout_s)});
  if (flags.master_addr) args.insert(args.end(), {"--master-addr", *flags.master_addr});
  if (flags.master_port) args.insert(args.end(), {"--master-port", std::to_string(*flags.master_port)});
  if (!o.on_failure.empty()) args.insert(args.end(), {"--on-failure", o.on_failure});
  if (o.max_restarts) args.insert(args.end(), {"--max-restarts", std::to_string(*o.max_restarts)});
  args.insert(args.end(), {"--", self});
  for (int i = 1; i < argc; ++i) {  // the same flags, minus --nproc-per-node
    const std::string a = argv[i];
    if (a == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc-per-node=", 0) == 0) continue;
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(launcher.c_str(), cargs.data());
  throw std::runtime_error("cannot start " + launcher + ": " + std::strerror(errno));
}

Faults::Faults(const TrainerOptions& o, int rank, int world) : o_(o), rank_(rank), first_attempt_(restart_count() == 0) {
  if (o.kill_rank.has_value() != o.kill_at_step.has_value()) throw UsageError("--kill-rank and --kill-at-step go together");
  if (o.kill_node && !o.kill_rank) throw UsageError("--kill-node goes with --kill-rank and --kill-at-step");
  if (o.skip_rank.has_value() != o.skip_at_step.has_value()) throw UsageError("--skip-rank and --skip-at-step go together");
  if (o.straggle_rank.has_value() != (o.straggle_ms > 0)) throw UsageError("--straggle-rank and --straggle-ms go together");
  // The ranks are checked in the first attempt only: a restart may have a smaller world (a node left).
  for (const auto& [flag, r] : {std::pair{"--kill-rank", o.kill_rank}, {"--skip-rank", o.skip_rank}, {"--straggle-rank", o.straggle_rank}}) {
    if (!first_attempt_) break;
    if (r && *r >= world) throw UsageError(std::string(flag) + " " + std::to_string(*r) + ": no such rank in a world of " + std::to_string(world));
  }
  if (!first_attempt_ && (o.kill_rank || o.skip_rank || o.straggle_rank)) {
    log0("fault injection off: this is restart " + std::to_string(restart_count()) + " (TORCHELASTIC_RESTART_COUNT)");
  }
}

void Faults::before_step(int64_t step, DistributedDataParallel& ddp) const {
  if (!first_attempt_) return;
  if (o_.straggle_rank == rank_) {
    Span s("straggling (--straggle-ms)", "fault");
    std::this_thread::sleep_for(std::chrono::milliseconds(o_.straggle_ms));
  }
  if (o_.skip_rank == rank_ && o_.skip_at_step == step) ddp.skip_next_allreduce();
}

void Faults::after_step(int64_t step) const {
  if (first_attempt_ && o_.kill_rank == rank_ && o_.kill_at_step == step) {
    log("fault injection: SIGKILL after step " + std::to_string(step) + (o_.kill_node ? ", to this rank and its launcher (pid " +
                                                                                            std::to_string(::getppid()) + "): a node dies" : ""));
    trace().flush();
    if (o_.kill_node) ::kill(::getppid(), SIGKILL);
    ::raise(SIGKILL);
  }
}

}  // namespace ddp
