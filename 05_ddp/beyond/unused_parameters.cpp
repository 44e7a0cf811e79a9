// provides: FindUnusedParameters: a forward may skip parameters (--find-unused-parameters).
#include "05_ddp/beyond/unused_parameters.h"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "common/basics/log.h"
#include "common/observe/trace.h"

namespace ddp {

// Note [Unused parameters]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A forward that skips a branch (--model mlp_branch skips its aux head on some batches) leaves
// that branch's parameters without a gradient: their hooks never fire, their bucket never
// completes, and DDP stops with the error that names them (finish_backward; PyTorch: "Expected
// to have finished reduction in the prior iteration"). PyTorch's find_unused_parameters=True,
// and ours (--find-unused-parameters):
//   - after each forward that will synchronise, walk the autograd graph back from the output
//     (prepare_for_backward) and list the parameters whose gradient accumulator it does not
//     reach: a walk over every node of the graph, every step, the price of the flag;
//   - when backward starts, mark those ready at once: their bucket slot gets their .grad() as it
//     is, times 1/world (LibTorch 1.13's zero_grad() leaves zeros there, 2.x's None: then zeros);
//   - a bitmap of the parameters whose hook fired on this rank is summed over the ranks (one more
//     all-reduce per step, of 4 bytes per parameter); a parameter no rank used keeps its .grad()
//     untouched, one that some rank used gets the bucket's value: the sum of the ranks that used
//     it divided by the world size (not by how many used it: PyTorch's averaging, kept for parity);
//   - the buckets are cut by size in definition order once and never rebuilt (PyTorch's reducer
//     rebuilds only with static_graph or without find_unused_parameters: a graph that does not
//     change; torch/csrc/distributed/c10d/reducer.hpp, Reducer::should_rebuild_buckets, PyTorch 1.13).
// Under no_sync() nothing is walked and no usage is recorded, as in PyTorch: the step's last
// micro-batch alone decides which parameters count as used. A reducer option of the class (Note
// [Reducer options]).

void FindUnusedParameters::installed() {
  here_.assign(ddp_.parameters().size(), 0);
  everywhere_.assign(ddp_.parameters().size(), 0);
  // PyTorch's buckets for this case: by size in definition order (1 MiB, then the cap), the
  // list reversed so that the last layers' bucket comes first; never rebuilt.
  auto assignment = by_size_in_definition_order();
  std::reverse(assignment.begin(), assignment.end());
  keep_buckets(assignment);
  log0("buckets cut by size in definition order, the last layers' first, never rebuilt (--find-unused-parameters): " +
       ddp_.describe_buckets());
}

void FindUnusedParameters::prepare_for_backward(const torch::Tensor& output) {
  if (!syncing() || !torch::GradMode::is_enabled() || !output.requires_grad()) return;
  const double start = wall_us();
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> stack{output.grad_fn().get()};
  while (!stack.empty()) {
    const torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  now_.clear();
  for (size_t i = 0; i < ddp_.parameters().size(); ++i) {
    if (!seen.count(accumulator(i))) now_.push_back(i), ++here_[i];
  }
  ++walks_, nodes_ += static_cast<int64_t>(seen.size()), walk_us_ += wall_us() - start;
}

void FindUnusedParameters::backward_started() {
  summed_ = false;
  for (size_t i : now_) {
    torch::Tensor view = place_in_bucket(i);
    const torch::Tensor& grad = ddp_.parameters()[i].grad();
    if (grad.defined()) copy_into_bucket(view, grad);
    else view.zero_();
    count_as_ready(i);
  }
  now_.clear();
  launch_ready_buckets();
}

bool FindUnusedParameters::average_into_grad(size_t i) {
  const std::vector<torch::Tensor>& params = ddp_.parameters();
  if (!summed_) {  // once per backward, on every rank at the same point of finish_backward
    std::vector<torch::Tensor> used{torch::zeros({static_cast<int64_t>(params.size())}, torch::kInt32)};
    for (size_t j : ready_order()) used[0][static_cast<int64_t>(j)] = 1;
    used[0] = used[0].to(params[0].device());
    Group& g = group();
    run(g, "all-reduce", "unused-parameters", used[0].numel() * 4, [&] { return g.pg->allreduce(used); });
    used_ = used[0].cpu();
    summed_ = true;
    for (size_t j = 0; j < params.size(); ++j) everywhere_[j] += used_[static_cast<int64_t>(j)].item<int>() == 0;
  }
  return used_[static_cast<int64_t>(i)].item<int>() != 0;  // one no rank used keeps its .grad() as it was
}

std::string FindUnusedParameters::describe() const {
  char cost[160];
  std::snprintf(cost, sizeof(cost), "graph walked %lld times, %.0f nodes and %.1f us per walk", static_cast<long long>(walks_),
                walks_ ? static_cast<double>(nodes_) / walks_ : 0.0, walks_ ? walk_us_ / walks_ : 0.0);
  std::string s = std::string("--find-unused-parameters: ") + cost;
  for (size_t i = 0; i < ddp_.parameters().size(); ++i) {
    if (here_[i] || everywhere_[i]) {
      s += "; " + param_name(i) + " unused here in " + std::to_string(here_[i]) + " step(s), on every rank in " +
           std::to_string(everywhere_[i]);
    }
  }
  return s;
}

}  // namespace ddp
