// defines: FindUnusedParameters, PyTorch's find_unused_parameters=True as a reducer option of the
// DDP class (--find-unused-parameters; going_further/unused_parameters.md).
#pragma once
#include <string>
#include <vector>

#include "05_ddp/ddp.h"

namespace ddp {

// A parameter a forward does not reach is reduced as unused instead of stopping the run; the
// buckets are cut by size in definition order and never rebuilt: Note [Unused parameters].
class FindUnusedParameters : public DistributedDataParallel::ReducerOption {
 public:
  using ReducerOption::ReducerOption;
  const char* name() const override { return "find_unused_parameters"; }
  void installed() override;         // its buckets
  void backward_started() override;  // the unreached parameters marked ready
  bool average_into_grad(size_t i) override;  // not for a parameter no rank used
  std::string describe() const override;
  // What PyTorch's DDP forward does after the module's: note the parameters `output` does not
  // reach (a walk of the autograd graph).
  void prepare_for_backward(const torch::Tensor& output);

 private:
  std::vector<size_t> now_;  // this forward's unreached parameters
  torch::Tensor used_;       // 1 per parameter its hook saw, summed over the ranks
  bool summed_ = false;
  int64_t walks_ = 0, nodes_ = 0;
  double walk_us_ = 0;
  std::vector<int64_t> here_, everywhere_;  // steps each parameter was unused
};

}  // namespace ddp
