// provides: ShardedCheckpoints. See Note [Sharded checkpoints].
#include "07_fsdp/sharded_checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

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
  // Newest first, rank 0's folder names the candidate steps; a step counts only when every rank
  // of the world that wrote it left an intact file.
  std::vector<std::string> candidates = ddp::list_checkpoints(rank_dir(dir_, 0));
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const std::string file = it->substr(it->rfind('/') + 1);
    std::vector<torch::serialize::InputArchive> files(1);
    std::string why;
    if (!ddp::read_checkpoint(*it, cpu, files[0], why)) {
      ddp::log0("skipping checkpoint " + *it + ": " + why);
      continue;
    }
    if (const std::string diff = other_run(files[0], model_name_, optimizer, sampler_.data, fsdp_); !diff.empty()) {
      throw ddp::UsageError("refusing to resume from " + *it + ": it is intact but not this run's: " + diff + ". Nothing in " + dir_ +
                            " was changed: resume with the settings it was written with, start over with --reset (deletes "
                            "its checkpoints), or use another --out");
    }
    const int old_world = static_cast<int>(read(files[0], "run.world").item<int64_t>());
    bool whole = true;
    files.resize(old_world);
    for (int q = 1; q < old_world && whole; ++q) {
      const std::string path = rank_dir(dir_, q) + "/" + file;
      if (!ddp::read_checkpoint(path, cpu, files[q], why)) {
        ddp::log0("skipping step of " + *it + ": rank " + std::to_string(q) + "'s shard " + path + " is " + why);
        whole = false;
      }
    }
    if (!whole) continue;

    ddp::SamplerState saved;
    saved.seed = static_cast<uint64_t>(read(files[0], "sampler.seed").item<int64_t>());
    saved.steps_per_epoch = read(files[0], "sampler.steps_per_epoch").item<int64_t>();
    saved.global_batch = read(files[0], "sampler.global_batch").item<int64_t>();
    saved.train_samples = read(files[0], "sampler.train_samples").item<int64_t>();
    saved.world = old_world;
    ddp::check_same_data_position(*it, saved, sampler_);
    const int64_t step = read(files[0], "step").item<int64_t>();

    // Each parameter's rows and state: from this rank's own file at the same world, else put
    // together whole from every old rank's, in rank order, and cut for this world.
    torch::NoGradGuard no_grad;
    const auto& info = fsdp_.param_info();
    const std::vector<torch::Tensor>& shards = fsdp_.parameters();
    const int k = ddp::tensors_per_state(opt_);
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string& n = info[i].name;
      auto mine = [&](const std::string& key) {
        if (old_world == world) return read(files[rank], key);
        std::vector<torch::Tensor> parts;
        for (int q = 0; q < old_world; ++q) parts.push_back(read(files[q], key));
        return torch::cat(parts, 0).narrow(0, info[i].first_row, shards[i].size(0)).clone();
      };
      shards[i].copy_(mine("param." + n));
      torch::Tensor t;
      if (files[0].try_read("state_step." + n, t)) {
        std::vector<torch::Tensor> state;
        for (int s = 0; s < k; ++s) state.push_back(mine("state." + n + "." + std::to_string(s)).to(shards[i].device()));
        opt_.state()[ddp::key_of(opt_, shards[i])] = ddp::make_state(opt_, state, t.item<int64_t>());
      }
    }
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(read(files[old_world == world ? rank : 0], "rng.cpu"));
    agree(step);
    ddp::log0("resumed from the " + std::to_string(old_world) + " shards of step " + std::to_string(step) + " (" + file + ")" +
              (old_world == world ? "" : ", cut again for " + std::to_string(world) + " ranks") + " (--reset starts over)");
    return step;
  }
  agree(0);
  return 0;
}

}  // namespace ch07
