// provides: replay(), the single-process reference of a run with faults.
#include "08_fault_tolerance/launch.h"

#include "08_fault_tolerance/heal.h"

#include <sstream>

namespace ch08 {

namespace {

// Contributor j's gradient at step r: one batch; with a replica group of G ranks, chapter 05's DDP
// average of its G batches (each times 1/G, summed in rank order: Note [A replica group of several ranks]).
std::vector<torch::Tensor> contributor_gradient(torch::nn::Sequential& model, const std::vector<torch::Tensor>& params,
                                                const StepRecord& r, int64_t j) {
  std::vector<torch::Tensor> sum;
  const torch::Tensor inverse = torch::scalar_tensor(1.0 / static_cast<double>(r.ranks), torch::kDouble);  // as 05's DDP
  for (int64_t k = 0; k < r.ranks; ++k) {
    auto [x, y] = ddp::toy::batch(static_cast<int>(r.position / r.batch + j * r.ranks + k), 0, static_cast<int>(r.batch), 1);
    std::vector<torch::Tensor> g = torch::autograd::grad({torch::mse_loss(model->forward(x), y)}, params);
    if (r.ranks == 1) return g;
    for (size_t i = 0; i < g.size(); ++i) {
      torch::Tensor part = at::mul(g[i], inverse);
      if (sum.size() < g.size()) sum.push_back(part);
      else sum[i] = sum[i] + part;
    }
  }
  return sum;
}

}  // namespace

std::vector<torch::Tensor> replay(const std::vector<StepRecord>& schedule, const ddp::toy::TrainConfig& cfg) {
  auto model = ddp::toy::make_model(cfg.seed);
  std::vector<torch::Tensor> params = model->parameters();
  auto optimizer = ddp::toy::make_optimizer(params, cfg);
  for (const StepRecord& r : schedule) {
    std::vector<torch::Tensor> sum;
    const int64_t n = static_cast<int64_t>(r.contributors.size());
    for (int64_t j = 0; j < n; ++j) {
      std::vector<torch::Tensor> g = contributor_gradient(model, params, r, j);
      if (sum.empty()) sum = g;
      else for (size_t k = 0; k < g.size(); ++k) sum[k] = sum[k] + g[k];  // the contributors' order, as in the all-reduce
    }
    for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = sum[k].div_(n);
    optimizer->step();
  }
  return params;
}

namespace {

struct Replica {
  torch::nn::Sequential model;
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  Diloco diloco;  // under DiLoCo only
};

Replica fresh(const ddp::toy::TrainConfig& cfg, const Outer& outer) {
  Replica r{ddp::toy::make_model(cfg.seed), {}, nullptr, {}};
  r.params = r.model->parameters();
  r.optimizer = ddp::toy::make_optimizer(r.params, cfg);
  r.diloco = make_diloco(r.params, outer);
  return r;
}

// What healing copies (Note [Healing from a peer]): the parameters and the optimizer's state,
// and DiLoCo's global parameters and outer optimizer.
void copy_state(const Replica& from, Replica& to) {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < to.params.size(); ++k) to.params[k].copy_(from.params[k]);
  load_optimizer_bytes(*to.optimizer, optimizer_bytes(*from.optimizer));
  if (!from.diloco.outer) return;
  for (size_t k = 0; k < to.params.size(); ++k) to.diloco.global[k].copy_(from.diloco.global[k]);
  load_optimizer_bytes(*to.diloco.outer, optimizer_bytes(*from.diloco.outer));
}

}  // namespace

std::map<std::string, std::vector<torch::Tensor>> replay_local(const std::vector<StepRecord>& schedule,
                                                               const std::vector<HealRecord>& heals,
                                                               const ddp::toy::TrainConfig& cfg, const Outer& outer) {
  std::map<std::string, Replica> replicas;
  auto get = [&](const std::string& id) -> Replica& {
    if (!replicas.count(id)) replicas.emplace(id, fresh(cfg, outer));
    return replicas.at(id);
  };
  for (const StepRecord& r : schedule) {
    for (const HealRecord& h : heals)
      if (h.step == r.step) copy_state(get(h.donor), get(h.replica));
    const int64_t n = static_cast<int64_t>(r.contributors.size());
    for (int64_t j = 0; j < n; ++j) {
      Replica& me = get(r.contributors[j]);
      std::vector<torch::Tensor> g = contributor_gradient(me.model, me.params, r, j);
      for (size_t k = 0; k < g.size(); ++k) me.params[k].mutable_grad() = g[k];
      me.optimizer->step();
    }
    std::vector<std::string> receivers = r.contributors;  // and every member healed this step (zeros, then the average)
    for (const HealRecord& h : heals)
      if (h.step == r.step) receivers.push_back(h.replica);
    if (r.average == "discarded") {  // DiLoCo's failed sync: all back to the global parameters
      for (const std::string& id : receivers) discard_local_steps(get(id).diloco, get(id).params);
    } else if (r.average == "pseudo-gradients") {  // DiLoCo: summed in the contributors' order, then divided
      torch::Tensor sum;
      for (int64_t j = 0; j < n; ++j) {
        Replica& c = get(r.contributors[j]);
        torch::Tensor flat = pseudo_gradient(c.diloco, c.params);
        sum = sum.defined() ? sum + flat : flat;
      }
      sum.div_(n);
      for (const std::string& id : receivers) outer_step(get(id).diloco, get(id).params, sum);
    } else if (r.average == "parameters") {  // local SGD: each flat, divided by n, summed in their order
      torch::Tensor sum;
      for (int64_t j = 0; j < n; ++j) {
        std::vector<torch::Tensor> parts;
        for (const torch::Tensor& p : get(r.contributors[j]).params) parts.push_back(p.detach().reshape(-1));
        torch::Tensor flat = torch::cat(parts).div_(n);
        sum = sum.defined() ? sum + flat : flat;
      }
      torch::NoGradGuard no_grad;
      for (const std::string& id : receivers) {
        int64_t offset = 0;
        for (torch::Tensor& p : get(id).params) p.copy_(sum.narrow(0, offset, p.numel()).view_as(p)), offset += p.numel();
      }
    }
  }
  std::map<std::string, std::vector<torch::Tensor>> out;
  for (auto& [id, r] : replicas) out[id] = r.params;
  return out;
}

}  // namespace ch08
