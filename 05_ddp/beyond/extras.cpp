// provides: RunExtras, which calls the parts listed in extras.h at their moments of a run.
#include "05_ddp/beyond/extras.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "05_ddp/beyond/ddp_flags.h"
#include "05_ddp/beyond/elastic.h"
#include "05_ddp/beyond/zero.h"
#include "05_ddp/trainer/metrics.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/compute/tensor_memory.h"
#include "common/data/toy_task.h"
#include "common/observe/run_trace.h"
#include "common/observe/trace.h"
#include "common/slurm/preemption.h"

namespace ddp {

RunExtras::RunExtras(TrainerOptions& o, Group& group, const torch::Device& device)
    : o_((split_global_batch(o, group.size()), o)),
      group_(group),
      device_(device),
      signal_(parse_signal(o.requeue_signal)),
      faults_(o, group.rank(), group.size()),
      recorder_(group),
      samples_(o.record_samples, group.rank()),
      stop_vote_(group),
      amp_(std::make_unique<Amp>(o.amp, device)) {  // --amp without a GPU: refused here, before the data loads
  // Every collective is recorded, so that a failed one says which rank is to blame (Note
  // [Flight recorder]); with --trace each rank also draws its timeline (Note [Trace files]).
  open_trace(o.trace, group);
}

void RunExtras::compose(DistributedDataParallel& ddp, AnyModel& model, LossFn& loss_of, OptimizerFactory& make_optimizer,
                        DeviceBatches& batches, DistributedSampler& sampler) {
  apply_ddp_flags(ddp, model, group_, o_);
  if (o_.zero) {  // going_further/zero.md: it wraps the optimizer, and touches neither DDP nor the loop
    make_optimizer = [make = make_optimizer, &group = group_](const std::vector<torch::Tensor>& params) {
      return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<ZeroRedundancyOptimizer>(params, make, group));
    };
  }
  amp_->wrap(loss_of);  // gpu.md
  amp_->wrap(make_optimizer);
  join_ = std::make_unique<Join>(o_, ddp, sampler, group_, device_);  // join.md
  ddp_ = &ddp;
  if (!o_.record_samples.empty()) {  // before the first set_order(), which keeps the order only for an observer
    batches.observe([this](const std::vector<int64_t>& order, int64_t from, int64_t to) { samples_.record(step_, order, from, to); });
  }
}

void RunExtras::start(int64_t step, int64_t total_steps) {
  overlap_.watch(*ddp_);  // Note [Overlap share]
  faults_.attach(*ddp_, group_);
  gpu_timeline_ = std::make_unique<GpuTimeline>(device_);  // with --trace on a GPU
  fresh_run_ = step == 0;  // the drills rehearse once: not after a resume
  total_steps_ = total_steps;
  if (o_.drill_after && fresh_run_) drill_preemption(signal_, *o_.drill_after);
  if (group_.rank() == 0 && !o_.save_init.empty()) {  // every parameter of the course's models gets a gradient
    if (fresh_run_) toy::save_params(ddp_->parameters(), o_.save_init);
    else log("--save-init: not written, the run resumed at step " + std::to_string(step) + " (--reset starts over)");
  }
}

int64_t RunExtras::before_step(int64_t step, int64_t total_steps, int64_t own, int64_t first, int64_t last) {
  if (!started_) {
    start(step, total_steps);
    started_ = true;
  }
  step_ = step;
  recorder_.set_step(step + 1);  // steps count from 1 in every log line, as the progress lines
  faults_.before_step(step);
  amp_->at_step(step + 1);  // counted from 1, as here
  return join_->end_of_batches(step, own, first, last);
}

RunExtras::StepEnd RunExtras::end_step(int64_t step, bool epoch_end, Checkpoints& checkpoints) {
  if (epoch_end) join_->sync_final_model();
  return StepEnd(*this, step, checkpoints);
}

RunExtras::StepEnd::StepEnd(RunExtras& extras, int64_t step, Checkpoints& checkpoints)
    : extras_(extras), step_(step), checkpoints_(checkpoints), exceptions_(std::uncaught_exceptions()) {}

RunExtras::StepEnd::~StepEnd() noexcept(false) {
  if (std::uncaught_exceptions() == exceptions_) extras_.after_step(step_, checkpoints_);
}

void RunExtras::after_step(int64_t step, Checkpoints& checkpoints) {
  // Note [Preemption and requeue] (common/slurm/preemption.cpp), chapter 06's lesson.
  if (o_.drill_at_step == step + 1 && fresh_run_) ::raise(signal_);  // as if the scheduler sent it now
  const bool last_step = step + 1 == total_steps_;
  if (stop_vote_.next(preemption_signal() != 0, /*post=*/!last_step) && !last_step) {
    checkpoints.save(step + 1);  // every rank stops after this same step, and none of it is lost
    throw Exit{stop_for_requeue(group_, step + 1, preemption_signal())};
  }
  faults_.after_step(step);
  trace().flush();
}

namespace {

double resident_bytes() {  // the second field of /proc/self/statm, in pages
  long pages = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f && std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  if (f) std::fclose(f);
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

struct GradientBytes {  // bytes of gradient storage now: the buckets, and .grad() apart from them
  size_t buckets = 0, grads_apart = 0;
};

GradientBytes gradient_bytes(const DistributedDataParallel& ddp) {
  GradientBytes g;
  for (const auto& b : ddp.buckets()) g.buckets += b.flat.numel() * b.flat.element_size();
  for (const auto& p : ddp.parameters()) {
    const torch::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    bool in_a_bucket = false;  // with --gradient-as-bucket-view, a view into one
    for (const auto& b : ddp.buckets()) in_a_bucket = in_a_bucket || grad.is_alias_of(b.flat);
    if (!in_a_bucket) g.grads_apart += grad.numel() * grad.element_size();
  }
  return g;
}

}  // namespace

void RunExtras::report(const DistributedDataParallel& ddp) {
  const OverlapShare& overlap = overlap_;  // Note [Overlap share], from the same clock as --trace
  if (gpu_timeline_ && gpu_timeline_->on()) {
    const GpuTimeline::Overlap gpu = gpu_timeline_->stop();
    log0("GPU timeline: " + std::to_string(gpu.gpu_events) + " kernels and copies in the trace" +
         (gpu.kernels == 0 ? std::string(group_.size() == 1 ? "; no gradient all-reduce kernel (a world of one: NCCL has nothing to add)"
                                                            : "; no gradient all-reduce kernel recognised (is_gradient_allreduce)")
                           : "; overlap: " + percent(gpu.share()) + " of all-reduce kernel time ran beside compute kernels (" +
                                 std::to_string(gpu.kernels) + " all-reduce kernels, " + seconds(gpu.comm_us / 1e6) + " in all)"));
  } else if (device_.is_cuda()) {
    log0("overlap: on a GPU the host's clock cannot see it; --trace measures it from the GPU's kernels");
  } else if (overlap.backwards > 0) {
    log0("overlap: " + percent(overlap.share()) + " of all-reduce time hidden behind backward (" +
         seconds(overlap.comm_us / overlap.backwards / 1e6) + " of all-reduce per step on rank 0)");
  }
  if (o_.find_unused_parameters) log0(ddp.reducer_option().describe());  // Note [Unused parameters]
  const GradientBytes grads = gradient_bytes(ddp);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: KiB on Linux
  // The kernel folds each thread's cached page counts into the process's lazily, so ru_maxrss
  // can trail the RSS read a moment later by a few MiB: the peak is at least what is resident now.
  const double now = resident_bytes();
  log0("gradient memory: " + mib(grads.buckets) + " in buckets + " + mib(grads.grads_apart) + " in .grad() apart from them (" +
       std::to_string(grads.buckets) + " + " + std::to_string(grads.grads_apart) + " bytes" +
       (o_.gradient_as_bucket_view ? ", --gradient-as-bucket-view" : "") + "); rank 0's RSS now " + mib(now) +
       ", at its peak " + mib(std::max(now, usage.ru_maxrss * 1024.0)));
  // --memory-limit-mb: each rank's own peak (with --zero they differ), as 07 prints it always.
  if (o_.memory_limit_mb) log(TensorMemory::peak_line());
}

void RunExtras::end_training(const DistributedDataParallel& ddp) {
  report(ddp);
  ddp::finish_trace(o_.trace, group_);
  if (group_.rank() == 0 && !o_.save_params.empty()) toy::save_params(ddp.parameters(), o_.save_params);
}

}  // namespace ddp
