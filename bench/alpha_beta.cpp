// provides: the alpha-beta fit and the DDP step prediction of bench/cost_model.
#include "bench/alpha_beta.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

namespace ddp::cost {

double algbw(const Point& p) { return p.bytes / p.seconds; }
double busbw(const Point& p) { return algbw(p) * 2.0 * (p.world - 1) / p.world; }

AlphaBeta fit(const std::vector<Point>& points) {
  // T = a*x + b*y with x = 2(n-1), y = 2(n-1)/n S; weighted normal equations.
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  std::set<double> sizes;
  for (const Point& p : points) {
    if (p.world < 2 || p.bytes <= 0 || !(p.seconds > 0)) throw std::invalid_argument("a point needs world >= 2, bytes > 0, time > 0");
    const double w = 1.0 / (p.seconds * p.seconds);
    const double x = 2.0 * (p.world - 1), y = 2.0 * (p.world - 1) / p.world * p.bytes;
    sxx += w * x * x, sxy += w * x * y, syy += w * y * y, sxt += w * x * p.seconds, syt += w * y * p.seconds;
    sizes.insert(p.bytes);
  }
  const double det = sxx * syy - sxy * sxy;
  if (sizes.size() < 2 || !(std::fabs(det) > 1e-300)) throw std::invalid_argument("the fit needs at least two message sizes");
  AlphaBeta m;
  m.alpha = (sxt * syy - syt * sxy) / det;
  m.beta = (sxx * syt - sxy * sxt) / det;
  return m;
}

StepPrediction predict_step(const AlphaBeta& m, const StepPlan& plan) {
  StepPrediction out;
  const double first = plan.first_bucket;
  // The buckets: (bytes, ready time).
  std::vector<std::pair<double, double>> buckets;
  if (plan.gradients.empty()) {
    double done_bytes = 0;
    for (double limit = first; done_bytes < plan.param_bytes; limit = plan.bucket_cap) {
      const double size = std::min(limit, plan.param_bytes - done_bytes);
      done_bytes += size;
      buckets.emplace_back(size, plan.backward_s * done_bytes / plan.param_bytes);
    }
  } else {
    double bytes = 0, limit = first;
    for (size_t i = 0; i < plan.gradients.size(); ++i) {
      bytes += plan.gradients[i].bytes;
      if (bytes >= limit || i + 1 == plan.gradients.size()) {
        buckets.emplace_back(bytes, plan.gradients[i].ready_s);
        bytes = 0, limit = plan.bucket_cap;
      }
    }
  }
  double comm_end = 0;
  for (const auto& [size, ready] : buckets) {
    const double t = m.time(plan.world, size * plan.wire_fraction);
    comm_end = std::max(comm_end, ready) + t;  // one all-reduce after another
    out.comm_s += t;
    ++out.buckets;
  }
  out.exposed_s = std::max(0.0, comm_end - plan.backward_s);
  out.step_s = plan.forward_s + plan.backward_s + out.exposed_s + plan.optimizer_s;
  return out;
}

AlphaBeta cluster(double alpha, int nodes, double intra_gbps, double inter_gbps) {
  const double slowest = nodes > 1 ? std::min(intra_gbps, inter_gbps) : intra_gbps;
  return AlphaBeta{alpha, 8.0 / (slowest * 1e9)};
}

}  // namespace ddp::cost
