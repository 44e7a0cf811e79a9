// defines: DistributedDataParallel, the chapter's lesson: chapter 04's hooks, grouped into buckets.
//
// Read this header down to "Composing onto the class", then its private part (the class's own
// state); skip on a first reading what lies between: how going_further/'s pages compose onto
// the class without the class knowing them, and two options of PyTorch's reducer itself.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "05_ddp/buckets.h"  // the bucket plan: assign_buckets(), kFirstBucketBytes, kOneBucket
#include "05_ddp/comm_hook.h"
#include "common/group/process_group.h"

namespace ddp {

class DistributedDataParallel {
 public:
  struct Bucket {
    std::vector<size_t> params;  // indices into parameters(), in the order they sit in `flat`
    std::vector<int64_t> offsets;
    torch::Tensor flat;    // every gradient of the bucket, side by side: one all-reduce for all
    size_t pending = 0;    // gradients of this backward still to come
    Reduction reduction;   // its all-reduce, started when pending reaches 0: the Work to wait for (comm_hook.h)
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

  // For the log: "2 buckets: bucket0 3.07 MiB (4 tensors, fc2.bias to fc1.weight), ..." and limits.
  std::string describe_buckets() const;

  // ---- Composing onto the class (ddp_interface.cpp): skip on a first reading ----

  // ddp_model.register_comm_hook(state, hook) in PyTorch (comm_hook.h): before the first backward.
  void register_comm_hook(CommHook hook);
  const CommHook& comm_hook() const { return hook_; }
  // The bucket's collectives as the class starts them: the hook's, or allreduce_sum().
  Reduction run_comm_hook(GradBucket& bucket);
  // What PyTorch's Join hook for DDP shadows a step with (_match_all_reduce_for_bwd_pass): the
  // buckets, in bucket order, as zeros, each then given to run_comm_hook().
  std::vector<GradBucket> zeros_like_buckets() const;
  // Divide by n instead of the world size from the next backward on (Join: the ranks still training).
  void set_gradient_divisor(int n);
  // Every rank takes rank `src`'s parameters and buffers (PyTorch's _sync_params_and_buffers).
  void sync_params_and_buffers(int src);
  // Watches every synchronising backward once its collectives are done; `computed_us` is when its
  // last gradient was ready (Note [Overlap share]).
  using Observer = std::function<void(const DistributedDataParallel&, double computed_us)>;
  void observe_backward(Observer observer) { observers_.push_back(std::move(observer)); }

  const std::vector<torch::Tensor>& parameters() const { return params_; }  // those that get a gradient
  const std::vector<Bucket>& buckets() const { return buckets_; }
  std::vector<std::vector<size_t>> bucket_assignment() const;  // parameter indices, in launch order
  bool rebuilt() const { return rebuilt_; }
  int allreduces_last_backward() const { return launched_last_; }  // one per bucket
  // Per bucket of the last synchronising backward: the gradients that had arrived when its
  // all-reduce started (fewer than all: it overlapped the rest of backward).
  const std::vector<size_t>& gradients_ready_at_launch() const { return ready_at_launch_; }
  // A resumed run keeps the buckets the interrupted one had rebuilt (Note [Rebuilding the
  // buckets]). UsageError unless `assignment` holds every parameter that gets a gradient once.
  void restore_buckets(const std::vector<std::vector<size_t>>& assignment);

  // ---- Options of PyTorch's reducer itself (ddp_options.cpp): Note [Reducer options] ----

  // What gradient_as_bucket_view and find_unused_parameters (beyond/) change in the class's
  // steps, one call at each point; this default does what the lesson does there.
  class ReducerOption {
   public:
    explicit ReducerOption(DistributedDataParallel& ddp) : ddp_(ddp) {}
    virtual ~ReducerOption() = default;
    virtual const char* name() const { return "none"; }  // PyTorch's argument, for messages
    virtual void installed() { buckets_built(); }  // by set_reducer_option()
    virtual void buckets_built() {}     // the first buckets, the rebuilt ones, a checkpoint's
    virtual void backward_started() {}  // the first hook of a synchronising backward
    // Step 4: gradient i into `slot`, its place in its bucket: copy_into_bucket().
    virtual void into_bucket(size_t i, torch::Tensor& slot);
    // Step 6: whether parameter i's .grad() takes its bucket's average.
    virtual bool average_into_grad(size_t /*i*/) { return true; }
    virtual std::string describe() const { return ""; }  // for the log

   protected:
    // The class's parts an option works with (ddp_options.cpp).
    torch::Tensor place_in_bucket(size_t i) const;  // parameter i's slot, flat
    void copy_into_bucket(torch::Tensor& slot, const torch::Tensor& grad) const;  // times 1/world, unless a comm hook
    int divisor() const { return ddp_.divisor_; }
    bool syncing() const { return ddp_.sync_; }
    const torch::autograd::Node* accumulator(size_t i) const { return ddp_.accumulators_[i].get(); }
    const std::vector<size_t>& ready_order() const { return ddp_.ready_order_; }  // this backward's hooks so far
    void count_as_ready(size_t i) const { --ddp_.buckets_[ddp_.bucket_of_[i]].pending; }  // without its hook
    void launch_ready_buckets() const { ddp_.launch_ready_buckets(); }
    std::vector<std::vector<size_t>> by_size_in_definition_order() const;  // 1 MiB, then the cap
    void keep_buckets(const std::vector<std::vector<size_t>>& assignment) const;  // built now, never rebuilt
    Group& group() const { return ddp_.group_; }
    const std::string& param_name(size_t i) const { return ddp_.names_[i]; }

    DistributedDataParallel& ddp_;
  };
  // Before the first backward (UsageError after it, as PyTorch's constructor arguments); one
  // option at a time.
  void set_reducer_option(std::unique_ptr<ReducerOption> option);
  const ReducerOption& reducer_option() const { return *option_; }

 private:
  // ---- The class's own state and steps, which ddp.cpp uses ----
  void build_buckets(const std::vector<std::vector<size_t>>& assignment);
  // Rank `src`'s values into `tensors` on every rank, one flat broadcast per dtype (ddp_interface.cpp).
  void broadcast_from(const std::vector<torch::Tensor>& tensors, const std::string& tag, int src = 0);
  std::vector<torch::Tensor> module_state() const;  // the parameters, then the buffers
  void on_gradient_ready(size_t i);  // the hook
  void copy_into_bucket(torch::Tensor& view, const torch::Tensor& grad);  // step 4: times 1/world, unless a comm hook
  void launch_ready_buckets();
  void finish_backward();  // queued to run once at the end of backward
  GradBucket grad_bucket(size_t k) const;
  [[noreturn]] void throw_for_missing_gradients();  // names them
  void before_first_backward(const char* what) const;  // UsageError after it

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
  bool sync_ = true, in_backward_ = false, rebuilt_ = false, backward_seen_ = false;
  std::unique_ptr<ReducerOption> option_;  // by default the lesson's steps (Note [Reducer options])
  std::vector<Observer> observers_;
  size_t next_bucket_ = 0;
  int launched_last_ = 0;
  std::vector<size_t> ready_order_;  // this backward's gradients in arrival order (rebuild, checks)
  std::vector<size_t> ready_at_launch_;
};

}  // namespace ddp
