// provides: ShardedCheckpoints. See Note [Sharded checkpoints].
#include "07_fsdp/sharded_checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "05_ddp/trainer/optimizer_state.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/state/checkpoint.h"

namespace ch07 {
namespace {

std::string rank_dir(const std::string& dir, int rank) { return dir + "/rank-" + std::to_string(rank); }

torch::Tensor read(torch::serialize::InputArchive& a, const std::string& key) {
  torch::Tensor t;  // a fresh tensor per read: read() into a defined one re-points it
  a.read(key, t);
  return t;
}

std::string text(torch::serialize::InputArchive& a, const std::string& key) {
  c10::IValue v;
  return a.try_read(key, v) ? v.toStringRef() : std::string();
}

// The first difference between the checkpoint and this run, "" when there is none.
std::string other_run(torch::serialize::InputArchive& a, const std::string& model, const std::string& optimizer,
                      const std::string& data, const FullyShardedDataParallel& fsdp) {
  if (text(a, "run.model") != model) return "it holds --model " + text(a, "run.model") + ", this run builds --model " + model;
  if (text(a, "run.optimizer") != optimizer) {
    return "it was trained with --optimizer " + text(a, "run.optimizer") + ", this run uses " + optimizer;
  }
  if (text(a, "run.data") != data) return "it was trained on " + text(a, "run.data") + " data, this run uses " + data;
  for (const auto& info : fsdp.param_info()) {
    torch::Tensor shape;
    if (!a.try_read("shape." + info.name, shape)) return "it has no parameter " + info.name;
    std::vector<int64_t> theirs(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel());
    if (theirs != info.shape) return "parameter " + info.name + " has another shape there";
  }
  return "";
}

// Where each old rank's rows of a parameter lie, from the index old rank 0's file holds
// ("rows.<name>": first row and count per old rank, as DCP's .metadata); a file written
// without one gets the cut of Note [Sharding a unit] for its world, which wrote it.
std::vector<std::pair<int64_t, int64_t>> old_rows(torch::serialize::InputArchive& a, const FullyShardedDataParallel::ParamInfo& info,
                                                  int old_world) {
  std::vector<std::pair<int64_t, int64_t>> rows;
  torch::Tensor index;
  if (a.try_read("rows." + info.name, index)) {
    for (int q = 0; q < old_world; ++q) rows.emplace_back(index[q][0].item<int64_t>(), index[q][1].item<int64_t>());
    return rows;
  }
  const int64_t all = info.shape.empty() ? 1 : info.shape[0], chunk = (all + old_world - 1) / old_world;
  for (int q = 0; q < old_world; ++q) rows.emplace_back(std::min(q * chunk, all), std::clamp(all - q * chunk, int64_t{0}, chunk));
  return rows;
}

}  // namespace

ShardedCheckpoints::ShardedCheckpoints(std::string dir, ddp::SamplerState sampler, const ddp::TrainerOptions& o,
                                       FullyShardedDataParallel& fsdp, torch::optim::Optimizer& opt, ddp::Group& group)
    : dir_(std::move(dir)), sampler_(std::move(sampler)), model_name_(o.model), keep_(o.keep), fsdp_(fsdp), opt_(opt), group_(group) {}

int64_t ShardedCheckpoints::resume_or_reset(const ddp::TrainerOptions& o) {
  if (ddp::start_over(o)) {
    if (group_.rank() == 0) {
      int removed = 0;
      for (int r = 0;; ++r) {  // every rank's folder an earlier run left, whatever its world
        struct stat st {};
        if (::stat(rank_dir(dir_, r).c_str(), &st) != 0) break;
        for (const auto& path : ddp::list_checkpoints(rank_dir(dir_, r))) removed += std::remove(path.c_str()) == 0;
        ddp::remove_stale_temporaries(rank_dir(dir_, r));
      }
      if (removed) ddp::log("--reset: removed " + std::to_string(removed) + " checkpoint file(s) of an earlier run from " + dir_);
    }
    group_.pg->barrier()->wait();
    return 0;
  }
  return saved_ = resume();
}

void ShardedCheckpoints::save(int64_t step) {
  if (step == saved_) return;
  if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    throw ddp::UsageError("cannot create the checkpoint folder " + dir_ + ": " + std::strerror(errno));
  }
  const auto& info = fsdp_.param_info();
  const std::vector<torch::Tensor>& shards = fsdp_.parameters();
  const std::string path = ddp::save_checkpoint(rank_dir(dir_, group_.rank()), step, keep_, [&](torch::serialize::OutputArchive& a) {
    a.write("run.model", c10::IValue(model_name_));  // Note [Never lose a run]
    a.write("run.optimizer", c10::IValue(ddp::optimizer_kind(opt_)));
    a.write("run.data", c10::IValue(sampler_.data));
    a.write("run.world", torch::tensor(static_cast<int64_t>(group_.size())));
    a.write("run.rank", torch::tensor(static_cast<int64_t>(group_.rank())));
    a.write("step", torch::tensor(step));
    a.write("sampler.seed", torch::tensor(static_cast<int64_t>(sampler_.seed)));
    a.write("sampler.steps_per_epoch", torch::tensor(sampler_.steps_per_epoch));
    a.write("sampler.global_batch", torch::tensor(sampler_.global_batch));
    a.write("sampler.train_samples", torch::tensor(sampler_.train_samples));
    a.write("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string& n = info[i].name;
      a.write("shape." + n, torch::tensor(info[i].shape, torch::kInt64));
      a.write("first_row." + n, torch::tensor(info[i].first_row));
      if (group_.rank() == 0) {  // the index: where every rank's rows of it lie (the same cut on every rank)
        const int64_t all = info[i].shape.empty() ? 1 : info[i].shape[0], chunk = info[i].chunk_rows;
        torch::Tensor index = torch::empty({group_.size(), 2}, torch::kInt64);
        for (int q = 0; q < group_.size(); ++q) {
          index[q][0] = std::min(q * chunk, all);
          index[q][1] = std::clamp(all - q * chunk, int64_t{0}, chunk);
        }
        a.write("rows." + n, index);
      }
      a.write("param." + n, shards[i].detach().cpu());
      if (const auto* st = ddp::find_state(opt_, shards[i])) {
        const std::vector<torch::Tensor> t = ddp::state_tensors(*st);
        for (size_t k = 0; k < t.size(); ++k) a.write("state." + n + "." + std::to_string(k), t[k].cpu());
        a.write("state_step." + n, torch::tensor(ddp::state_step(*st)));
      }
    }
  });
  group_.pg->barrier()->wait();  // no rank runs ahead of a step that another rank may still fail to write
  ddp::log0("checkpoint written: " + std::to_string(group_.size()) + " shards, " +
            rank_dir(dir_, 0).substr(0, rank_dir(dir_, 0).size() - 1) + "<r>/" + path.substr(path.rfind('/') + 1));
  saved_ = step;
}

int64_t ShardedCheckpoints::resume() {
  const torch::Device cpu(torch::kCPU);
  // Every rank must continue from the same step (05's check).
  auto agree = [&](int64_t step) { ddp::check_same_step(group_, step, dir_, fsdp_.parameters().at(0).device()); };

  const int rank = group_.rank(), world = group_.size();
  const std::string optimizer = ddp::optimizer_kind(opt_);
  const auto& info = fsdp_.param_info();
  const std::vector<torch::Tensor>& shards = fsdp_.parameters();
  // Newest first, rank 0's folder names the candidate steps; a step counts only when every rank
  // of the world that wrote it left an intact file.
  std::vector<std::string> candidates = ddp::list_checkpoints(rank_dir(dir_, 0));
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const std::string file = it->substr(it->rfind('/') + 1);
    auto path_of = [&](int q) { return rank_dir(dir_, q) + "/" + file; };
    // Old rank 0's file: the run's identity, its world, the sampler, and where every old rank's
    // rows lie (the index). Every rank reads it: one old rank's shard, not the model.
    auto archive = std::make_unique<torch::serialize::InputArchive>();
    std::string why;
    if (!ddp::read_checkpoint(*it, cpu, *archive, why)) {
      ddp::log0("skipping checkpoint " + *it + ": " + why);
      continue;
    }
    if (const std::string diff = other_run(*archive, model_name_, optimizer, sampler_.data, fsdp_); !diff.empty()) {
      throw ddp::UsageError("refusing to resume from " + *it + ": it is intact but not this run's: " + diff + ". Nothing in " + dir_ +
                            " was changed: resume with the settings it was written with, start over with --reset (deletes "
                            "its checkpoints), or use another --out");
    }
    const int old_world = static_cast<int>(read(*archive, "run.world").item<int64_t>());
    // The old files this rank reads: those holding rows of its own (at the same world, its own).
    std::vector<std::vector<std::pair<int64_t, int64_t>>> rows(shards.size());  // per parameter, per old rank: first row, count
    std::vector<bool> needed(old_world, false);
    for (size_t i = 0; i < shards.size(); ++i) {
      rows[i] = old_rows(*archive, info[i], old_world);
      const int64_t lo = info[i].first_row, hi = lo + shards[i].size(0);
      for (int q = 0; q < old_world; ++q) {
        needed[q] = needed[q] || (old_world == world ? q == rank : std::max(lo, rows[i][q].first) < std::min(hi, rows[i][q].first + rows[i][q].second));
      }
    }
    ddp::SamplerState saved;
    saved.seed = static_cast<uint64_t>(read(*archive, "sampler.seed").item<int64_t>());
    saved.steps_per_epoch = read(*archive, "sampler.steps_per_epoch").item<int64_t>();
    saved.global_batch = read(*archive, "sampler.global_batch").item<int64_t>();
    saved.train_samples = read(*archive, "sampler.train_samples").item<int64_t>();
    saved.world = old_world;
    const int64_t step = read(*archive, "step").item<int64_t>();
    const torch::Tensor rng = read(*archive, "rng.cpu");  // at another world, every rank continues old rank 0's
    archive.reset();  // one old file in memory at a time: it is opened again below if this rank needs its rows
    // Every old file intact? Each rank opens the ones it reads and those of old ranks q with
    // q % world == rank, one at a time, and the ranks agree on the first broken one.
    int broken = old_world;
    for (int q = 1; q < old_world && broken == old_world; ++q) {
      if (!needed[q] && q % world != rank) continue;
      torch::serialize::InputArchive probe;
      if (!ddp::read_checkpoint(path_of(q), cpu, probe, why)) {
        ddp::log("skipping step of " + *it + ": rank " + std::to_string(q) + "'s shard " + path_of(q) + " is " + why);
        broken = q;
      }
    }
    std::vector<torch::Tensor> first_broken{torch::tensor({static_cast<int64_t>(broken)}).to(shards.at(0).device())};
    c10d::AllreduceOptions min;
    min.reduceOp = c10d::ReduceOp::MIN;
    group_.pg->allreduce(first_broken, min)->wait();
    if (first_broken[0].item<int64_t>() < old_world) continue;
    ddp::check_same_data_position(*it, saved, sampler_);

    // This rank's rows of each parameter and of its state, file by file: from each old file
    // only the rows this rank owns, and one old file in memory at a time (Note [Sharded checkpoints]).
    torch::NoGradGuard no_grad;
    const int k = ddp::tensors_per_state(opt_);
    std::vector<std::vector<torch::Tensor>> state(shards.size());
    std::vector<int64_t> state_step(shards.size(), -1);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng);
    for (int q = 0; q < old_world; ++q) {
      if (!needed[q]) continue;
      archive = std::make_unique<torch::serialize::InputArchive>();
      if (!ddp::read_checkpoint(path_of(q), cpu, *archive, why)) throw std::runtime_error(path_of(q) + " became " + why);
      torch::serialize::InputArchive& a = *archive;
      if (old_world == world) gen.set_state(read(a, "rng.cpu"));  // at the same world, each rank its own
      for (size_t i = 0; i < shards.size(); ++i) {
        const std::string& n = info[i].name;
        const int64_t from = rows[i][q].first, count = rows[i][q].second;
        const int64_t lo = std::max(info[i].first_row, from), hi = std::min(info[i].first_row + shards[i].size(0), from + count);
        torch::Tensor t;
        const bool has_state = a.try_read("state_step." + n, t);
        if (has_state) state_step[i] = t.item<int64_t>();
        while (has_state && state[i].size() < static_cast<size_t>(k)) state[i].push_back(torch::zeros_like(shards[i]));
        if (hi <= lo) continue;
        auto copy_rows = [&](const torch::Tensor& into, const std::string& key) {
          into.narrow(0, lo - info[i].first_row, hi - lo).copy_(read(a, key).narrow(0, lo - from, hi - lo));
        };
        copy_rows(shards[i], "param." + n);
        for (int s = 0; has_state && s < k; ++s) copy_rows(state[i][s], "state." + n + "." + std::to_string(s));
      }
      archive.reset();  // this old file's rows are copied: it goes
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      if (state_step[i] >= 0) opt_.state()[ddp::key_of(opt_, shards[i])] = ddp::make_state(opt_, state[i], state_step[i]);
    }
    agree(step);
    ddp::log0("resumed from the " + std::to_string(old_world) + " shards of step " + std::to_string(step) + " (" + file + ")" +
              (old_world == world ? "" : ", cut again for " + std::to_string(world) + " ranks") + " (--reset starts over)");
    return step;
  }
  agree(0);
  return 0;
}

}  // namespace ch07
