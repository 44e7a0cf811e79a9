// provides: sync_parameters(), the parameter average of local SGD (Note [Local SGD]).
#include "08_fault_tolerance/local_sgd.h"

#include "08_fault_tolerance/step_vote.h"

namespace ch08 {

bool sync_parameters(ddp::Backend& pg, std::vector<torch::Tensor>& params, bool contributes, int contributors) {
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& p : params) parts.push_back(p.detach().reshape(-1));
  std::vector<torch::Tensor> flat{torch::cat(parts)};
  if (contributes) flat[0].div_(contributors);  // divide first, then sum: PyTorch's order
  else flat[0].zero_();
  bool ok = true;
  try {
    pg.allreduce(flat)->wait();
  } catch (const std::exception&) {
    ok = false;
  }
  if (!commit_vote(pg, ok)) return false;
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (torch::Tensor& p : params) {
    p.copy_(flat[0].narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  return true;
}

}  // namespace ch08
