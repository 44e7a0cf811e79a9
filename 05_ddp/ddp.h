// defines: DistributedDataParallel, the chapter's lesson: chapter 04's hooks, grouped into buckets.
//
// Read: this header down to "Composing onto the class", then ddp.cpp: the buckets, the hook on
// each gradient, the launch order, the rebuild after the first iteration, and no_sync().
// Skip on a first reading: the rest of the header. It is how the pages of going_further/ compose
// onto the class without the class knowing them, as in PyTorch: a communication hook is a
// function handed to the class (fp16, PowerSGD), Join drives the class through what it exposes,
// observers watch each backward (the overlap share). Its code is in ddp_interface.cpp; the two
// options of PyTorch's reducer itself are in ddp_options.cpp.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// A bucket's reduction in flight: the collective to wait for (none: `work.work` is null) and
// what turns its result into the bucket's average once it is done (nothing, for a plain sum).
// issue(group, ...) starts a collective and returns at once with a Pending: c10d's Work (the
// handle chapter 03's send and recv returned), numbered by the flight recorder, which names a
// rank when one fails; wait(group, pending) blocks until it is done (flight_recorder.h).
struct Reduction {
  Pending work;
  std::function<void()> finish;
};

class DistributedDataParallel {
 public:
  struct Bucket {
    std::vector<size_t> params;  // indices into parameters(), in the order they sit in `flat`
    std::vector<int64_t> offsets;
    torch::Tensor flat;    // every gradient of the bucket, side by side: one all-reduce for all
    size_t pending = 0;    // gradients of this backward still to come
    Reduction reduction;   // its all-reduce, started when pending reaches 0
  };

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

  // Copies rank 0's buffers (BatchNorm's running statistics) to every rank: what PyTorch's DDP
  // does before every forward with broadcast_buffers=True, its default. Call it before each
  // forward, also in no_sync() and before evaluating. See Note [Buffers].
  void sync_buffers();

  // For the log: "2 buckets: bucket0 3.07 MiB (4 tensors, fc2.bias to fc1.weight), ...", and the
  // limits they were cut at.
  std::string describe_buckets() const;

  // ---- Composing onto the class (ddp_interface.cpp): skip on a first reading ----

  // What a communication hook is given: PyTorch's GradBucket.
  struct GradBucket {
    size_t index;
    bool is_last;                          // the backward's last bucket
    torch::Tensor buffer;                  // the gradients as they are (not divided), side by side
    std::vector<torch::Tensor> gradients;  // views into `buffer`, shaped as the parameters
    std::string tag;                       // "bucket0": its name in the flight recorder and --trace
  };
  // A hook starts the bucket's collectives and returns them; the bucket's average must be in
  // `buffer` once the Reduction is waited for and finished (PyTorch's hook(state, bucket) ->
  // Future). Without one, the class divides while copying and all-reduces the sum.
  using CommHook = std::function<Reduction(GradBucket&)>;
  // ddp_model.register_comm_hook(state, hook) in PyTorch: before the first backward.
  void register_comm_hook(CommHook hook);
  const CommHook& comm_hook() const { return hook_; }
  // What PyTorch's Join hook for DDP uses (_match_all_reduce_for_bwd_pass): the buckets, in
  // bucket order, as zeros; and the bucket's collective as the class starts it (hook or not).
  std::vector<GradBucket> zeros_like_buckets() const;
  Reduction run_comm_hook(GradBucket& bucket);
  // Divide the gradients by n instead of the world size, from the next backward on (PyTorch's
  // reducer divides by what Join reports: the ranks still training).
  void set_gradient_divisor(int n);
  // Every rank takes rank `src`'s parameters and buffers (PyTorch's _sync_params_and_buffers).
  void sync_params_and_buffers(int src);

  // Watches every synchronising backward once its collectives are done; `computed_us` is when its
  // last gradient was ready (for Note [Overlap share]).
  using Observer = std::function<void(const DistributedDataParallel&, double computed_us)>;
  void observe_backward(Observer observer) { observers_.push_back(std::move(observer)); }

  const std::vector<torch::Tensor>& parameters() const { return params_; }  // those that get a gradient
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The buckets, as lists of parameter indices in the order their all-reduces start.
  std::vector<std::vector<size_t>> bucket_assignment() const;
  bool rebuilt() const { return rebuilt_; }
  // Collectives started by the last synchronising backward (one per bucket).
  int allreduces_last_backward() const { return launched_last_; }
  // For each bucket of the last synchronising backward: how many gradients had arrived when its
  // all-reduce started. Fewer than all of them = it overlapped the rest of backward.
  const std::vector<size_t>& gradients_ready_at_launch() const { return ready_at_launch_; }

  // A resumed run continues with the buckets the interrupted one had rebuilt (kept in its
  // checkpoint): see Note [Rebuilding the buckets]. Throws UsageError unless `assignment` holds
  // every parameter that gets a gradient exactly once.
  void restore_buckets(const std::vector<std::vector<size_t>>& assignment);

  // ---- Two options of PyTorch's reducer itself (ddp_options.cpp): see Note [Reducer options] ----

  // gradient_as_bucket_view=True: each .grad() is a view into its place in its bucket (Note
  // [Gradients as bucket views]). Before the first backward.
  void set_gradient_as_bucket_view(bool on);
  struct GradientBytes {  // bytes of gradient storage now: the buckets, and .grad() apart from them
    size_t buckets = 0, grads_apart = 0;
  };
  GradientBytes gradient_bytes() const;
  // find_unused_parameters=True (Note [Unused parameters]): a parameter a forward does not reach
  // is reduced as unused instead of stopping the run. Before the first backward; the buckets are
  // then cut by size in definition order and never rebuilt. prepare_for_backward(output) is what
  // PyTorch's DDP forward does after the module's: note the parameters it does not reach.
  void set_find_unused_parameters(bool on);
  void prepare_for_backward(const torch::Tensor& output);
  std::string describe_unused() const;  // for the log


 private:
  // The core (ddp.cpp).
  void build_buckets(const std::vector<std::vector<size_t>>& assignment);
  // Rank `src`'s values into `tensors` on every rank: one flat broadcast per dtype.
  void broadcast_from(const std::vector<torch::Tensor>& tensors, const std::string& tag, int src = 0);
  void on_gradient_ready(size_t i);  // the hook
  // Step 4's copy: times 1/world (Note [Divide before the sum]); with a comm hook as it is.
  void copy_into_bucket(torch::Tensor& view, const torch::Tensor& grad);
  std::vector<torch::Tensor> module_state() const;  // the parameters, then the buffers
  void launch_ready_buckets();
  void finish_backward();  // queued to run once at the end of backward
  [[noreturn]] void throw_for_missing_gradients();  // names them (ddp_interface.cpp)
  void before_first_backward(const char* what) const;  // UsageError after it (ddp_interface.cpp)
  GradBucket grad_bucket(size_t k) const;
  // The reducer options' parts of it (ddp_options.cpp).
  void gradient_into_view(size_t i, torch::Tensor& view);  // gradient_as_bucket_view's step 4
  void point_gradients_at_buckets();  // ... and its .grad() = view, after a (re)build
  void mark_unused_ready();  // find_unused_parameters: the unreached parameters' share of step 4
  bool unused_everywhere(size_t i);  // ... and whether no rank used parameter i (the bitmap's sum)

  std::shared_ptr<torch::nn::Module> module_;
  Group& group_;
  size_t cap_bytes_;
  torch::Tensor inverse_world_;  // 1/world, multiplied in while copying into a bucket
  int divisor_ = 0;              // the world size, unless set_gradient_divisor() said otherwise
  CommHook hook_;                // none: divide while copying, all-reduce the sum
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<size_t> bytes_;  // each parameter's gradient size, for the bucket plan
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // see 04's Note [Keep the accumulator alive]
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  // param index -> bucket, position in it
  bool sync_ = true, in_backward_ = false, rebuilt_ = false, backward_seen_ = false, as_bucket_view_ = false;
  struct UnusedParameters;  // find_unused_parameters' state (ddp_options.cpp)
  std::shared_ptr<UnusedParameters> unused_;  // shared_ptr: deletes a type only ddp_options.cpp defines
  std::vector<Observer> observers_;
  size_t next_bucket_ = 0;
  int launched_last_ = 0;
  std::vector<size_t> ready_order_;  // this backward's gradients in arrival order (rebuild, checks)
  std::vector<size_t> ready_at_launch_;
};

// The plain sum of `bucket.buffer` over `group`, started: what run_comm_hook() starts when no
// hook is registered, for a hook that wraps "no hook" (--skip-rank's).
Reduction allreduce_sum(Group& group, DistributedDataParallel::GradBucket& bucket);

}  // namespace ddp
