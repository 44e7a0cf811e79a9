// provides: sync_parameters(), the parameter average of local SGD (Note [Local SGD]), and
// sync_diloco(), DiLoCo's outer step (Note [DiLoCo]).
#include "08_fault_tolerance/local_sgd.h"

#include "08_fault_tolerance/step_vote.h"

namespace ch08 {
namespace {

// The sync's all-reduce (SUM) of `flat`, then the vote on it; --fault allreduce and vote strike
// between. True only if every member's all-reduce succeeded.
bool allreduce_and_vote(ddp::Backend& pg, std::vector<torch::Tensor>& flat, const FaultPoint& hit) {
  bool ok = true;
  try {
    pg.allreduce(flat)->wait();
  } catch (const std::exception&) {
    ok = false;
  }
  if (hit) hit("allreduce");
  const bool commit = commit_vote(pg, ok);
  if (hit) hit("vote");
  return commit;
}

}  // namespace

bool sync_parameters(ddp::Backend& pg, std::vector<torch::Tensor>& params, bool contributes, int contributors,
                     const FaultPoint& hit) {
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& p : params) parts.push_back(p.detach().reshape(-1));
  std::vector<torch::Tensor> flat{torch::cat(parts)};
  if (contributes) flat[0].div_(contributors);  // divide first, then sum: PyTorch's order
  else flat[0].zero_();
  if (!allreduce_and_vote(pg, flat, hit)) return false;
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (torch::Tensor& p : params) {
    p.copy_(flat[0].narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  return true;
}

Diloco make_diloco(std::vector<torch::Tensor>& params, const Outer& outer) {
  Diloco d;
  if (outer.lr == 0) return d;  // not DiLoCo
  for (const torch::Tensor& p : params) d.global.push_back(p.detach().clone());
  d.outer = std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(outer.lr).momentum(outer.momentum).nesterov(outer.momentum > 0));
  return d;
}

torch::Tensor pseudo_gradient(const Diloco& d, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> parts;
  for (size_t k = 0; k < params.size(); ++k) parts.push_back((d.global[k] - params[k].detach()).reshape(-1));
  return torch::cat(parts);
}

void outer_step(Diloco& d, std::vector<torch::Tensor>& params, const torch::Tensor& avg) {
  {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].copy_(d.global[k]);
      params[k].mutable_grad() = avg.narrow(0, offset, params[k].numel()).view_as(params[k]).clone();
      offset += params[k].numel();
    }
  }
  d.outer->step();
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < params.size(); ++k) d.global[k].copy_(params[k]);
}

bool sync_diloco(ddp::Backend& pg, Diloco& d, std::vector<torch::Tensor>& params, bool contributes, int contributors,
                 const FaultPoint& hit) {
  std::vector<torch::Tensor> flat{pseudo_gradient(d, params)};
  if (!contributes) flat[0].zero_();
  if (!allreduce_and_vote(pg, flat, hit)) return false;  // summed here, divided below: torchft's Manager.allreduce
  outer_step(d, params, flat[0].div_(contributors));
  return true;
}

void discard_local_steps(const Diloco& d, std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < params.size(); ++k) params[k].copy_(d.global[k]);
}

}  // namespace ch08
