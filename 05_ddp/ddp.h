// defines: DistributedDataParallel, the chapter's lesson: chapter 04's hooks, grouped into buckets.
//
// Read: this header down to "Extensions", then ddp.cpp: the buckets, the hook on each gradient,
// the launch order, the rebuild after the first iteration, and no_sync().
// Skip on a first reading: the "Extensions" part of the class (communication hooks, the overlap
// share, buckets restored from a checkpoint, BatchNorm's buffers, the --skip-rank fault), whose
// code is in ddp_extensions.cpp.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "05_ddp/beyond/powersgd.h"
#include "common/observe/flight_recorder.h"
#include "common/group/process_group.h"

namespace ddp {

constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kFirstBucketBytes = 1 * kMiB;  // PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES
// As the bucket cap: every gradient in one bucket, all-reduced once backward has ended (no
// overlap), the baseline that buckets are measured against (05 --one-bucket).
constexpr size_t kOneBucket = SIZE_MAX;

// Which parameters go into which bucket: walk `order` (indices into `sizes_bytes`), fill a
// bucket until it holds at least its limit, then start the next. The first bucket's limit is
// first_limit, every later one cap (PyTorch's compute_bucket_assignment_by_size).
std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order, const std::vector<size_t>& sizes_bytes,
                                                size_t first_limit, size_t cap);

// What travels on the wire (an extension: Note [Communication hooks] in ddp_extensions.cpp).
enum class CommHook { kNone, kFp16, kBf16, kPowerSgd };
CommHook parse_comm_hook(const std::string& name);  // "none", "fp16", "bf16", "powersgd"; else UsageError

class DistributedDataParallel {
 public:
  // Broadcasts the module's parameters and buffers from rank 0, builds the buckets and puts a
  // hook on every parameter that requires a gradient.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, Group& group, size_t bucket_cap_bytes);

  // Skips communication while alive: gradients only accumulate locally in .grad(), and the
  // first backward after it ends all-reduces the sum of them (gradient accumulation).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d) { d_.sync_ = false; }
    ~NoSync() { d_.sync_ = true; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
  };
  std::unique_ptr<NoSync> no_sync() { return std::make_unique<NoSync>(*this); }

  // The buckets, as lists of parameter indices in the order their all-reduces start.
  std::vector<std::vector<size_t>> bucket_assignment() const;
  bool rebuilt() const { return rebuilt_; }
  // All-reduces started by the last synchronising backward (one per bucket).
  int allreduces_last_backward() const { return launched_last_; }
  // For each bucket of the last synchronising backward: how many gradients had arrived when its
  // all-reduce started. Fewer than all of them = it overlapped the rest of backward.
  const std::vector<size_t>& gradients_ready_at_launch() const { return ready_at_launch_; }

  // ---- Extensions (ddp_extensions.cpp): skip on a first reading ----

  // ddp_model.register_comm_hook(state, fp16_compress_hook) in PyTorch: before the first
  // backward. Throws UsageError where the backend cannot all-reduce the hook's type.
  // kPowerSgd: powerSGD_hook with a PowerSGDState of `powersgd`'s settings (Note [PowerSGD]).
  void register_comm_hook(CommHook hook, const PowerSgdOptions& powersgd = {});

  // gradient_as_bucket_view=True in PyTorch's constructor: each .grad() becomes a view into its
  // place in its bucket, so every gradient is stored once instead of twice (Note [Gradients as
  // bucket views]). Before the first backward.
  void set_gradient_as_bucket_view(bool on);
  // Bytes of gradient storage now: the buckets, and the .grad() tensors that are not views into
  // them (with the flag off, every one).
  struct GradientBytes {
    size_t buckets = 0, grads_apart = 0;
  };
  GradientBytes gradient_bytes() const;

  // find_unused_parameters=True in PyTorch's constructor (Note [Unused parameters]): a parameter
  // that a forward does not reach is reduced as unused instead of stopping the run. Before the
  // first backward; the buckets are then cut by size in definition order and never rebuilt.
  void set_find_unused_parameters(bool on);
  // What PyTorch's DDP forward does after the module's forward when the flag is on: walk the
  // autograd graph back from `output` and note the parameters it does not reach.
  void prepare_for_backward(const torch::Tensor& output);
  // For the log: the walks' cost, and how often each parameter was unused here and everywhere.
  std::string describe_unused() const;

  // Join (Note [Uneven inputs and Join], beyond/join.cpp). What a rank that has run out of data
  // does in place of a backward: one all-reduce of zeros per bucket, in bucket order, in the type
  // the comm hook sends (PyTorch's _match_all_reduce_for_bwd_pass).
  void shadow_backward();
  // Divide the gradients by n ranks instead of the world size, from the next backward on
  // (Join's divide_by_initial_world_size=False, n = the ranks still training).
  void set_gradient_divisor(int n);
  // Every rank takes rank `src`'s parameters and buffers (Join's final model sync).
  void sync_module_from(int src);

  // Copies rank 0's buffers (BatchNorm's running statistics) to every rank: what PyTorch's DDP
  // does before every forward with broadcast_buffers=True, its default. Call it before each
  // forward, also in no_sync() and before evaluating. See Note [Buffers].
  void sync_buffers();

  // A resumed run continues with the buckets the interrupted one had rebuilt (kept in its
  // checkpoint): see Note [Rebuilding the buckets]. Throws UsageError unless `assignment` holds
  // every parameter that gets a gradient exactly once.
  void restore_buckets(const std::vector<std::vector<size_t>>& assignment);

  // For the log: "2 buckets: bucket0 3.07 MiB (4 tensors, fc2.bias to fc1.weight), ...", and the
  // limits they were cut at.
  std::string describe_buckets() const;

  // How much of the all-reduce time was hidden behind backward: see Note [Overlap share].
  struct Overlap {
    double comm_us = 0;    // all-reduces in flight (their union), summed over backwards
    double hidden_us = 0;  // the part of it before backward's last gradient was ready
    int64_t backwards = 0;
    double share() const { return comm_us > 0 ? hidden_us / comm_us : 0; }
  };
  const Overlap& overlap() const { return overlap_; }

  // Fault injection (--skip-rank): the next synchronising backward does not start bucket 0's
  // all-reduce, as a rank with a rank-dependent bug would. The ranks' collectives no longer
  // match; the flight recorder must say who skipped.
  void skip_next_allreduce() { skip_next_ = true; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_, in the order they sit in `flat`
    std::vector<int64_t> offsets;
    torch::Tensor flat;  // every gradient of the bucket, side by side: one all-reduce for all
    torch::Tensor wire;  // with a comm hook: flat compressed, what the all-reduce sends
    size_t pending = 0;  // gradients of this backward still to come
    Pending work;  // its all-reduce (issue()/wait() in common/observe/flight_recorder.h)
    bool skipped = false;
  };

  // The core (ddp.cpp).
  void build_buckets(const std::vector<std::vector<size_t>>& assignment);
  // Rank 0's values into `tensors` on every rank: one flat broadcast per dtype.
  void broadcast_from_rank0(const std::vector<torch::Tensor>& tensors, const std::string& tag, int src = 0);
  void on_gradient_ready(size_t i);  // the hook
  // Step 4's copy: times 1/world (Note [Divide before the sum]); with a comm hook as it is.
  void copy_into_bucket(torch::Tensor& view, const torch::Tensor& grad);
  std::vector<torch::Tensor> module_state() const;  // the parameters, then the buffers
  void launch_ready_buckets();
  void finish_backward();  // queued to run once at the end of backward
  // The extensions' parts of it (ddp_extensions.cpp).
  torch::Tensor to_wire(Bucket& b);  // what the all-reduce sends: `flat`, or compressed by a hook
  std::vector<torch::Tensor> gradient_views(const Bucket& b) const;  // its gradients, shaped: PowerSGD's matrices
  bool skipped_by_fault_injection(Bucket& b, const std::string& tag);  // --skip-rank
  void gradient_into_view(size_t i, torch::Tensor& view);  // --gradient-as-bucket-view's step 4
  void point_gradients_at_buckets();  // ... and its .grad() = view, after a (re)build
  void mark_unused_ready();  // --find-unused-parameters: the unreached parameters' share of step 4
  bool unused_everywhere(size_t i);  // ... and whether no rank used parameter i (the bitmap's sum)
  void account_overlap(double computed_us);  // Note [Overlap share]

  std::shared_ptr<torch::nn::Module> module_;
  Group& group_;
  size_t cap_bytes_;
  torch::Tensor inverse_world_;  // 1/world, multiplied in while copying into a bucket
  int divisor_ = 0;              // the world size (or, under Join, the ranks still training)
  CommHook hook_ = CommHook::kNone;
  std::unique_ptr<PowerSgd> powersgd_;  // with --comm-hook powersgd: its state (Note [PowerSGD])
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<size_t> bytes_;  // each parameter's gradient size, for the bucket plan
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // see 04's Note [Keep the accumulator alive]
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  // param index -> bucket, position in it
  bool sync_ = true, in_backward_ = false, rebuilt_ = false, skip_next_ = false, as_bucket_view_ = false;
  struct Unused {  // --find-unused-parameters (Note [Unused parameters])
    bool on = false;
    std::vector<size_t> now;  // this forward's unreached parameters
    torch::Tensor used;       // 1 per parameter its hook saw, summed over the ranks
    Pending usage_work;       // that sum's all-reduce
    bool summed = false;
    int64_t walks = 0, nodes = 0;
    double walk_us = 0;
    std::vector<int64_t> here, everywhere;  // steps each parameter was unused
  } unused_;
  Overlap overlap_;
  size_t next_bucket_ = 0;
  int launched_last_ = 0;
  std::vector<size_t> ready_order_;  // this backward's gradients in arrival order (rebuild, checks)
  std::vector<size_t> ready_at_launch_;
};

}  // namespace ddp
