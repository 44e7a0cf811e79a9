// provides: ZeroRedundancyOptimizer (--zero): the greedy partition, the sharded step and the
// broadcasts, the state consolidated for checkpoints (Note [ZeRO-1: optimizer state sharded]).
#include "05_ddp/beyond/zero.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "05_ddp/trainer/optimizer_state.h"
#include "05_ddp/trainer/sgd.h"
#include "common/basics/log.h"
#include "common/observe/flight_recorder.h"

namespace ddp {
namespace {

c10::intrusive_ptr<c10d::Work> broadcast(Group& group, std::vector<torch::Tensor>& t, int root) {
  c10d::BroadcastOptions o;
  o.rootRank = root;
  return group.pg->broadcast(t, o);
}

}  // namespace

std::vector<int> partition_by_size(const std::vector<int64_t>& numels, int world) {
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), 0);
  // Python's sorted(..., reverse=True) is stable too: equal sizes keep their order.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> held(world, 0);
  std::vector<int> owner(numels.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(held.begin(), held.end()) - held.begin());  // the first of the least
    owner[i] = r;
    held[r] += numels[i];
  }
  return owner;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const std::vector<torch::Tensor>& params, Factory make, Group& group)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(params)}, make(params)->defaults().clone()),
      make_(std::move(make)),
      group_(group),
      params_(params) {
  std::vector<int64_t> numels;
  for (const auto& p : params_) {
    if (p.scalar_type() != params_[0].scalar_type() || p.device() != params_[0].device()) {
      throw std::logic_error("--zero: all parameters must share one dtype and device");  // as Python's ZeRO requires
    }
    numels.push_back(p.numel());
  }
  owner_ = partition_by_size(numels, group_.size());
  // Each rank's parameters in the order the partition gave them (largest first), as Python's
  // _partition_parameters()[rank] lists them: the broadcasts go in this order.
  shards_.assign(group_.size(), {});
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  for (size_t i : order) shards_[owner_[i]].push_back(i);
  std::vector<torch::Tensor> mine;
  for (size_t i : shards_[group_.rank()]) mine.push_back(params_[i]);
  local_ = make_(mine);

  std::string held;
  int64_t total = 0;
  for (int r = 0; r < group_.size(); ++r) {
    int64_t n = 0;
    for (size_t i : shards_[r]) n += numels[i];
    held += (r ? " | " : "") + std::to_string(n);
    total += n;
  }
  log0("ZeRO-1: " + std::to_string(params_.size()) + " parameter tensors over " + std::to_string(group_.size()) +
       " ranks, greedy by size, elements per rank " + held + " (1/world = " + std::to_string(total / group_.size()) +
       "); see Note [ZeRO-1: optimizer state sharded]");
  if (auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&local_->defaults()); sgd && sgd->momentum() == 0) {
    log0("ZeRO-1: SGD with --momentum 0 keeps no optimizer state, so there is nothing to shard: each rank still steps "
         "its own parameters and broadcasts them, which only adds communication");
  }
}

void ZeroRedundancyOptimizer::sync_options_to_local() {
  // Python's _sync_param_groups: every option but the parameters, main.cpp's lr among them.
  local_->param_groups()[0].set_options(param_groups_[0].options().clone());
}

torch::Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  sync_options_to_local();
  torch::Tensor loss = local_->step(closure);  // this rank's shard only
  torch::NoGradGuard no_grad;
  // Every parameter from its owner: rank 0's shard first, then rank 1's, ... (_sync_params).
  std::vector<std::vector<torch::Tensor>> tensors;
  tensors.reserve(params_.size());
  std::vector<Pending> pending;
  for (int r = 0; r < group_.size(); ++r) {
    for (size_t i : shards_[r]) {
      tensors.push_back({params_[i].detach()});
      auto& t = tensors.back();
      pending.push_back(issue(group_, "broadcast", "zero parameter", t[0].numel() * t[0].element_size(),
                              [&] { return broadcast(group_, t, r); }));
    }
  }
  for (auto& p : pending) wait(group_, p);
  if (!logged_) log_state_bytes();
  return loss;
}

void ZeroRedundancyOptimizer::log_state_bytes() {
  logged_ = true;
  int64_t mine = 0;
  for (const auto& [key, state] : local_->state()) {
    for (const auto& t : state_tensors(*state)) mine += t.numel() * t.element_size();
  }
  std::vector<torch::Tensor> all{torch::tensor({mine}, torch::kInt64).to(params_[0].device())};
  run(group_, "all-reduce", "zero state bytes", 8, [&] { return group_.pg->allreduce(all); });
  const int64_t total = all[0].item<int64_t>(), fair = total / group_.size();
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2fx", fair ? static_cast<double>(mine) / fair : 0.0);
  log("ZeRO-1: optimizer state on this rank " + std::to_string(mine) + " bytes of " + std::to_string(total) +
      " (1/world = " + std::to_string(fair) + "; " + ratio + ")");
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  torch::NoGradGuard no_grad;
  const int rank = group_.rank();
  const int k = tensors_per_state(*local_);
  // Which parameters have a state (and AdamW's step count): 1 + step, summed from the owners.
  torch::Tensor flags = torch::zeros({static_cast<int64_t>(params_.size())}, torch::kInt64);
  for (size_t i : shards_[rank]) {
    if (auto* s = find_state(*local_, params_[i])) flags[i] = 1 + state_step(*s);
  }
  std::vector<torch::Tensor> f{flags.to(params_[0].device())};
  run(group_, "all-reduce", "zero state flags", f[0].numel() * 8, [&] { return group_.pg->allreduce(f); });
  flags = f[0].cpu();
  const int64_t* has = flags.data_ptr<int64_t>();
  if (rank == to) {
    consolidated_ = make_(params_);
    consolidated_->param_groups()[0].set_options(param_groups_[0].options().clone());
  }
  for (int r = 0; r < group_.size(); ++r) {
    std::vector<size_t> with_state;
    int64_t numel = 0;
    for (size_t i : shards_[r]) {
      if (has[i]) with_state.push_back(i), numel += k * params_[i].numel();
    }
    if (with_state.empty()) continue;
    if (r == to) {  // its own: no message
      if (rank == to) {
        for (size_t i : with_state) {
          consolidated_->state()[key_of(*consolidated_, params_[i])] = find_state(*local_, params_[i])->clone();
        }
      }
      continue;
    }
    // One rank's whole shard as one flat tensor, broadcast from it (Python broadcasts the
    // pickled state_dict the same way: every rank takes part, only `to` keeps it).
    std::vector<torch::Tensor> flat;
    if (rank == r) {
      std::vector<torch::Tensor> pieces;
      for (size_t i : with_state) {
        for (const auto& t : state_tensors(*find_state(*local_, params_[i]))) pieces.push_back(t.reshape(-1));
      }
      flat.push_back(torch::cat(pieces));
    } else {
      flat.push_back(torch::empty({numel}, params_[0].options()));
    }
    run(group_, "broadcast", "zero state", numel * flat[0].element_size(), [&] { return broadcast(group_, flat, r); });
    if (rank != to) continue;
    int64_t at = 0;
    for (size_t i : with_state) {
      std::vector<torch::Tensor> t;
      for (int j = 0; j < k; ++j) {
        t.push_back(flat[0].narrow(0, at, params_[i].numel()).view_as(params_[i]).clone());  // its own storage
        at += params_[i].numel();
      }
      consolidated_->state()[key_of(*consolidated_, params_[i])] = make_state(*local_, t, has[i] - 1);
    }
  }
}

void ZeroRedundancyOptimizer::save(torch::serialize::OutputArchive& archive) const {
  if (!consolidated_) {
    throw std::logic_error("ZeroRedundancyOptimizer::save() on rank " + std::to_string(group_.rank()) +
                           " without consolidate_state_dict() there first");
  }
  consolidated_->save(archive);  // exactly what the optimizer without --zero writes
  consolidated_.reset();         // back to this rank's shard only
}

void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive& archive) {
  auto whole = make_(params_);
  whole->load(archive);  // the checkpoint's parameters are matched to ours by position
  param_groups_[0].set_options(whole->param_groups()[0].options().clone());
  sync_options_to_local();
  local_->state().clear();
  for (size_t i : shards_[group_.rank()]) {
    auto it = whole->state().find(key_of(*whole, params_[i]));
    if (it != whole->state().end()) local_->state()[key_of(*local_, params_[i])] = std::move(it->second);
  }
  logged_ = false;
}

}  // namespace ddp
