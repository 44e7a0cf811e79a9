// provides: checkpoint/resume for every rank, refusing another run's checkpoint; --reset.
#include "05_ddp/trainer/resume.h"

#include <cstdio>
#include <set>

#include "05_ddp/trainer/sharded_state.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/state/checkpoint.h"

namespace ddp {
namespace {

// Note [Resuming in the same buckets]
// The bucket layout decides more than speed: with more than two ranks, Gloo's ring all-reduce
// adds up each element in an order set by where it sits in its bucket, so another layout rounds
// differently (two ranks only ever compute a + b, which is b + a exactly). A run resumed from a
// checkpoint must therefore continue with the rebuilt buckets, not build the first-iteration
// ones again (Note [Rebuilding the buckets], ddp.cpp): the checkpoint carries them. Without
// that, a 4-rank run requeued by Slurm would end with other parameters than an uninterrupted
// one.
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

std::string shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t k = 0; k < t.dim(); ++k) s += (k ? ", " : "") + std::to_string(t.size(k));
  return s + "]";
}

std::string data_in_words(const std::string& data) { return data == "synthetic" ? "synthetic images" : "Fashion-MNIST"; }

// Throws (with the first difference) when the checkpoint `a` was written by another run: its
// model class, optimizer, data source, parameter names or shapes differ from this run's.
void check_same_run(torch::serialize::InputArchive& a, torch::nn::Module& model, const torch::optim::Optimizer& opt,
                    const std::string& data) {
  c10::IValue v;
  if (a.try_read("run.model", v) && v.toStringRef() != model.name()) {
    throw UsageError("it holds a " + v.toStringRef() + ", this run builds a " + model.name() + " (--model)");
  }
  if (a.try_read("run.optimizer", v) && v.toStringRef() != optimizer_kind(opt)) {
    throw UsageError("it was trained with --optimizer " + v.toStringRef() + ", this run uses " + optimizer_kind(opt));
  }
  if (a.try_read("run.data", v) && v.toStringRef() != data) {
    throw UsageError("it was trained on " + data_in_words(v.toStringRef()) + ", this run uses " + data_in_words(data) +
                     (data == "synthetic" ? " (--synthetic)" : " (no --synthetic)"));
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

std::string optimizer_kind(const torch::optim::Optimizer& opt) {
  if (auto* sharded = dynamic_cast<const ShardedState*>(&opt)) return optimizer_kind(sharded->local());  // --zero
  if (dynamic_cast<const torch::optim::AdamW*>(&opt)) return "adamw";
  if (dynamic_cast<const torch::optim::SGD*>(&opt)) return "sgd";
  return "unknown";
}

// Throws when `saved` (read from `path`) puts its step at other samples than `now` would.
// See Note [Resuming at another world size] (elastic.h).
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
  if (saved.train_samples != 0 && saved.train_samples != now.train_samples) {
    throw UsageError(path + " was written by a run on " + std::to_string(saved.train_samples) + " training images; this run has " +
                     std::to_string(now.train_samples) +
                     " (--train-samples). Its step would point to other samples: resume with the same data, or start over "
                     "with --reset");
  }
  if (saved.world != 0 && saved.world != now.world) {
    log0("resuming a run of " + std::to_string(saved.world) + " ranks with " + std::to_string(now.world) +
         ": the same global batch of " + std::to_string(now.global_batch) + ", so every step meets the same samples "
         "(Note [Resuming at another world size])");
  }
}

void checkpoint(const std::string& dir, int64_t step, const SamplerState& sampler, int keep, torch::nn::Module& model,
                torch::optim::Optimizer& opt, const DistributedDataParallel& ddp, Group& group) {
  // A sharded optimizer (--zero): every rank sends its shard of the state to rank 0, which writes
  // it whole, in the format of a run without --zero (Note [ZeRO-1: optimizer state sharded]).
  if (auto* sharded = dynamic_cast<ShardedState*>(&opt)) sharded->consolidate_state_dict(/*to=*/0);
  if (group.rank() == 0) {
    const std::string path = save_checkpoint(dir, step, keep, [&](torch::serialize::OutputArchive& a) {
      for (const auto& p : model.named_parameters()) a.write("model." + p.key(), p.value());
      for (const auto& b : model.named_buffers()) a.write("buffer." + b.key(), b.value(), /*is_buffer=*/true);
      torch::serialize::OutputArchive optimizer_state;
      opt.save(optimizer_state);
      a.write("optimizer", optimizer_state);
      a.write("run.model", c10::IValue(model.name()));  // Note [Never lose a run]
      a.write("run.optimizer", c10::IValue(optimizer_kind(opt)));
      a.write("run.data", c10::IValue(sampler.data));
      a.write("step", torch::tensor(static_cast<int64_t>(step)));
      a.write("epoch", torch::tensor(static_cast<int64_t>(step / sampler.steps_per_epoch)));
      a.write("sampler.seed", torch::tensor(static_cast<int64_t>(sampler.seed)));
      a.write("sampler.steps_per_epoch", torch::tensor(sampler.steps_per_epoch));
      a.write("sampler.global_batch", torch::tensor(sampler.global_batch));
      a.write("sampler.world", torch::tensor(sampler.world));
      a.write("sampler.train_samples", torch::tensor(sampler.train_samples));
      // Nothing in this trainer draws from it after the start, but a model with dropout would:
      // resuming must continue its random stream, not restart it.
      a.write("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
      // The rebuilt buckets, flattened as [count, size, indices..., size, indices...]: a resumed
      // run must sum in the same layout (Note [Resuming in the same buckets]).
      if (ddp.rebuilt()) a.write("ddp.buckets", encode_buckets(ddp.bucket_assignment()));
    });
    log("checkpoint written: " + path);
  }
  run(group, "barrier", "checkpoint", 0, [&] { return group.pg->barrier(); });
}

int64_t resume(const std::string& dir, const torch::Device& device, const SamplerState& sampler, bool eval_only,
               torch::nn::Module& model, torch::optim::Optimizer& opt, DistributedDataParallel& ddp, Group& group) {
  SamplerState saved;
  std::optional<std::vector<std::vector<size_t>>> buckets;
  if (group.rank() == 0) {  // rank 0 writes the checkpoints: a dead writer's leftovers are its own
    remove_stale_temporaries(dir);
  }
  auto loaded = load_latest_checkpoint(dir, device, [&](torch::serialize::InputArchive& a) {
    check_same_run(a, model, opt, sampler.data);  // an intact checkpoint of another run is refused, never skipped
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
    if (a.try_read("sampler.train_samples", t)) saved.train_samples = t.item<int64_t>();
    torch::Tensor flat;
    if (a.try_read("ddp.buckets", flat)) buckets = decode_buckets(flat.cpu());  // absent: written before the rebuild
  });
  if (loaded && !eval_only) check_same_data_position(loaded->path, saved, sampler);
  if (buckets) ddp.restore_buckets(*buckets);
  const int64_t step = loaded ? loaded->step : 0;
  check_same_step(group, step, dir, device);
  if (loaded) log0("resumed from " + loaded->path + " at step " + std::to_string(step) + " (--reset starts over)");
  return step;
}

void check_same_step(Group& group, int64_t step, const std::string& dir, const torch::Device& device) {
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
}

bool start_over(const TrainerOptions& o) {
  const bool restarted = restart_count() > 0;
  if (o.reset && restarted) log0("--reset applies to the first attempt; this is a restart: resuming");
  return o.reset && !restarted;
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

Checkpoints::Checkpoints(std::string dir, SamplerState sampler, int keep, torch::nn::Module& model,
                         torch::optim::Optimizer& opt, DistributedDataParallel& ddp, Group& group)
    : dir_(std::move(dir)), sampler_(std::move(sampler)), keep_(keep), model_(model), opt_(opt), ddp_(ddp), group_(group) {}

int64_t Checkpoints::resume_or_reset(const TrainerOptions& o, const torch::Device& device) {
  if (start_over(o)) {
    remove_checkpoints(dir_, group_);  // or a later resume would find the old run's
    return 0;
  }
  return saved_ = resume(dir_, device, sampler_, o.eval_only, model_, opt_, ddp_, group_);
}

void Checkpoints::save(int64_t step) {
  if (step == saved_) return;
  checkpoint(dir_, step, sampler_, keep_, model_, opt_, ddp_, group_);
  saved_ = step;
}

void say_already_finished(const TrainerOptions& o, const std::string& folder, int64_t step, int64_t total_steps) {
  std::string idle;  // the flags that asked for something during training
  for (const auto& [flag, set] : {std::pair{"--drill-after", o.drill_after.has_value()}, {"--drill-at-step", o.drill_at_step.has_value()},
                                  {"--kill-rank", o.kill_rank.has_value()}, {"--straggle-rank", o.straggle_rank.has_value()},
                                  {"--skip-rank", o.skip_rank.has_value()}}) {
    if (set) idle += (idle.empty() ? "" : ", ") + std::string(flag);
  }
  log0("the run in " + folder + " had already finished (step " + std::to_string(step) +
       (step == total_steps ? " of " + std::to_string(total_steps) : ", past this run's last step " + std::to_string(total_steps)) +
       "): nothing to train" + (idle.empty() ? "" : ", and " + idle + " had no step to act on") +
       "; the checks below evaluate its checkpoint. To train again: --reset (deletes its checkpoints) or another --out");
}

}  // namespace ddp
