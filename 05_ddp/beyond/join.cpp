// provides: Join: uneven inputs and PyTorch's Join context for DDP.
#include "05_ddp/beyond/join.h"

#include <string>

#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/observe/flight_recorder.h"

namespace ddp {

// Note [Uneven inputs and Join]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The sampler pads every rank's share to the same length (Note [Sampler semantics]), because
// DDP needs every rank in every all-reduce. Without padding (--uneven-shards: drop_last=False,
// no repeats) the first size % world ranks get one sample more, and at an epoch's end some ranks
// may have one batch more than the others. A rank out of data leaves the epoch, as a Python loop
// over its DataLoader does; the others start their next all-reduce and wait for it, until the
// timeout, and the flight recorder names the rank that is elsewhere.
// PyTorch's answer is the Join context, `with Join([ddp_model]):` around the loop, with DDP's
// _DDPJoinHook; ours, --join, does what they do, a step at a time:
//   - before each step every rank all-reduces 1 if it has the step's data, else 0 (PyTorch's
//     notify_join_context and _get_num_nonjoined_procs): the sum is the ranks still training;
//   - a rank out of data "shadows" the step: for each bucket, in bucket order, it all-reduces a
//     bucket of zeros where the others all-reduce their gradients, so their collectives match
//     and its zeros change no sum (x + 0 is x, exactly); it neither steps nor changes its model;
//   - the others divide the sum by the world size (PyTorch's default,
//     divide_by_initial_world_size=True: the joined ranks count as zero gradients) or, with
//     --divide-by-live-ranks, by the ranks still training (the average of those that trained);
//   - at the epoch's end every rank takes the parameters of the last rank to run out of data
//     (PyTorch's _sync_final_model: the highest rank among those that trained the last step), so
//     that the ranks that sat out the last steps do not start the next epoch with a stale model.
// A rank joins at the first step whose micro-batches it cannot all run (with --grad-accum, a
// rank with some but not all of a step's micro-batches drops them: it cannot all-reduce with the
// others on the step's last one). Steps and epochs stay global: every rank runs the same
// number of steps, the longest rank's, so validation and checkpoints meet. Optimizer state is not
// synchronised (PyTorch's Join does not either): a rank that sat out keeps the momentum of its
// last step. Not shadowed here (refused with exit 2): BatchNorm's buffers, unused parameters,
// PowerSGD's collectives, ZeRO's broadcasts (trainer.cpp).

Join::Join(const TrainerOptions& o, DistributedDataParallel& ddp, DistributedSampler& sampler, Group& group,
           const torch::Device& device)
    : ddp_(ddp), group_(group), device_(device), batch_(o.batch_size), uneven_(o.uneven_shards), join_(o.join),
      divide_by_live_(o.divide_by_live_ranks) {
  if (join_ && !uneven_) {
    throw UsageError("--join: the padding sampler gives every rank the same number of batches, so there is nothing to join; "
                     "add --uneven-shards (ranks then get different numbers of batches)");
  }
  if (divide_by_live_ && !join_) throw UsageError("--divide-by-live-ranks applies to --join only");
  if (join_ && (o.model == "cnn_bn" || o.sync_bn)) {
    throw UsageError("--join with BatchNorm buffers: not in this course (PyTorch broadcasts them from the highest rank still training)");
  }
  if (join_ && o.find_unused_parameters) throw UsageError("--join with --find-unused-parameters: not in this course (PyTorch allows it)");
  if (join_ && o.comm_hook == "powersgd") {
    throw UsageError("--join with --comm-hook powersgd: not in this course (a rank out of data would have to shadow PowerSGD's "
                     "three all-reduces per bucket, not one)");
  }
  if (join_ && o.zero) {  // PyTorch's ZeroRedundancyOptimizer joins through a hook of its own
    throw UsageError("--zero with --join: not in this course: a rank out of data skips the optimizer step, and with it the "
                     "broadcasts of the parameters it owns, which the other ranks would wait for");
  }
  sampler.set_padding(!uneven_);
}

namespace {

// DDP's join hook (PyTorch's _DDPJoinHook.main_hook, _match_all_reduce_for_bwd_pass): the
// collectives the others start for their buckets, in bucket order, run on zeros through the
// class's comm hook, so that type and size match whatever hook is registered.
void shadow_backward(DistributedDataParallel& ddp, Group& group) {
  for (auto& bucket : ddp.zeros_like_buckets()) {
    bucket.tag += " (Join: zeros)";
    Reduction r = ddp.run_comm_hook(bucket);
    if (r.work.work) wait(group, r.work);
  }
}

}  // namespace

int64_t Join::end_of_batches(int64_t step, int64_t own, int64_t first, int64_t last) {
  if (!uneven_) return last;
  const bool has_data = (own + batch_ - 1) / batch_ >= last;  // its batches reach the step's last micro-batch
  if (!join_) {
    if (!has_data && !said_) {
      log("out of data at step " + std::to_string(step + 1) + ": leaving the epoch, as a Python loop does when its DataLoader "
          "ends; the other ranks will wait for this rank in their all-reduce (--join shadows it)");
      said_ = true;
    }
    return has_data ? last : first;
  }
  std::vector<torch::Tensor> live{torch::tensor({has_data ? 1.0f : 0.0f}, torch::TensorOptions().device(device_))};
  run(group_, "all-reduce", "join: ranks still training", 4, [&] { return group_.pg->allreduce(live); });
  const int still = static_cast<int>(live[0].item<float>());
  trained_last_step_ = has_data;
  fewer_ = fewer_ || still < group_.size();
  if (has_data) {
    ddp_.set_gradient_divisor(divide_by_live_ ? still : group_.size());
    return last;
  }
  if (!said_) {
    log("out of data at step " + std::to_string(step + 1) + ": shadowing the all-reduces of the " + std::to_string(still) +
        " rank(s) still training until the epoch ends (--join)");
    said_ = true;
  }
  shadow_backward(ddp_, group_);
  return first;
}

void Join::sync_final_model() {
  if (!join_) return;
  std::vector<torch::Tensor> last{torch::tensor({trained_last_step_ ? static_cast<int64_t>(group_.rank()) : int64_t{-1}},
                                                torch::TensorOptions().dtype(torch::kInt64).device(device_))};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  run(group_, "all-reduce", "join: the last rank to run out of data", 8, [&] { return group_.pg->allreduce(last, max); });
  const int src = static_cast<int>(last[0].item<int64_t>());
  ddp_.sync_params_and_buffers(src);
  if (fewer_) log0("join: the epoch's last step(s) were trained by fewer ranks; every rank takes the model of rank " + std::to_string(src));
  trained_last_step_ = true, said_ = false, fewer_ = false;
}

}  // namespace ddp
