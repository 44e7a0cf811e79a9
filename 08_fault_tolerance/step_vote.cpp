// provides: average_gradients() and commit_vote().
#include "08_fault_tolerance/step_vote.h"

namespace ch08 {

bool average_gradients(ddp::Backend& pg, std::vector<torch::Tensor>& grads, bool contributes, int contributors,
                       const std::function<void()>& between) {
  try {
    for (torch::Tensor& g : grads) {
      if (!contributes) g.zero_();
      std::vector<torch::Tensor> buffer{g};
      pg.allreduce(buffer)->wait();  // SUM, as in chapter 03
      g.div_(contributors);
      if (between && &g == &grads.front()) between();
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool commit_vote(ddp::Backend& pg, bool ok) {
  try {
    std::vector<torch::Tensor> vote{torch::tensor({ok ? 1 : 0}, torch::kInt64)};
    c10d::AllreduceOptions min;
    min.reduceOp = c10d::ReduceOp::MIN;
    pg.allreduce(vote, min)->wait();
    return vote[0].item<int64_t>() == 1;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace ch08
