// provides: fp16_compress_hook and bf16_compress_hook for the DDP class.
#include "05_ddp/beyond/comm_hooks.h"

#include <torch/version.h>

#include <memory>
#include <string>
#include <vector>

#include "common/basics/errors.h"
#include "common/observe/flight_recorder.h"

namespace ddp {

// Note [Communication hooks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A hook decides what a bucket's all-reduce sends. PyTorch's fp16_compress_hook: cast the
// bucket to float16, divide it by the world size there, all-reduce that, and copy the result
// back into the float32 bucket; bf16_compress_hook the same with bfloat16. Half the bytes on the
// wire, for gradients rounded to 11 (fp16) or 8 (bf16) significant bits on the way. With a hook
// the gradients are copied into the bucket as they are: the hook divides, after the cast, so
// that the sum of world-many fp16 values stays in range. Done in this order, our result is
// bit-identical to PyTorch's DDP with the same hook (tests/test_trainer.cpp). On a slow link the
// halved bytes are what a step saves; on loopback the casts may cost more than they save.
CommHook compress_hook(Group& group, torch::ScalarType type) {
#if TORCH_VERSION_MAJOR < 2
  // LibTorch 1.13's Gloo has no bfloat16 sum ("Invalid scalar type"); PyTorch 1.13's DDP refuses
  // bf16_compress_hook without CUDA 11+ and NCCL 2.10+. NCCL has it, and so has 2.x's Gloo.
  if (type == torch::kBFloat16 && group.pg->getBackendName() == "gloo") {
    throw UsageError("--comm-hook bf16: the Gloo of LibTorch 1.13"
                     " cannot all-reduce bfloat16 (PyTorch 1.13 refuses bf16_compress_hook without CUDA and NCCL too); use "
                     "--comm-hook fp16, NCCL, or LibTorch 2.x");
  }
#endif
  return [&group, type](GradBucket& bucket) {
    std::vector<torch::Tensor> wire{bucket.buffer.to(type).div_(group.size())};  // compress, then divide
    Reduction r;
    r.work = issue(group, "all-reduce", bucket.tag, wire[0].numel() * wire[0].element_size(),
                   [&] { return group.pg->allreduce(wire); });
    r.finish = [buffer = bucket.buffer, sum = wire[0]]() mutable { buffer.copy_(sum); };  // decompressed
    return r;
  };
}

}  // namespace ddp
