// gpu_smoke: the NCCL/CUDA path of common/ compiles, links and, given a GPU, works: a one-rank
// NCCL process group all-reduces a tensor moved to cuda:0. Built only against a LibTorch with
// NCCL. Without a GPU it says so and exits 77, which ctest reports as "skipped", not "passed".
//
// gpu_smoke --trainer PATH_TO_05_ddp DATA_DIR: given GPUs, trains chapter 05 briefly on every GPU of this
// host with NCCL, in bf16 autocast and in fp16 with gradient scaling (same skip without one).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device on this host (torch::cuda::is_available() is false); "
                "ProcessGroupNCCL and the CUDA tensor path were compiled and linked, not run\n");
    return 77;
  }
  if (argc == 4 && std::string(argv[1]) == "--trainer") {
    const std::string gpus = std::to_string(torch::cuda::device_count());
    // The configured data folder (DDP_DATA_DIR) when this host has it; a GPU host often has
    // only the pip torch, not Debian's dataset package: then synthetic images of the same shape.
    const std::string data_dir = argv[3];
    const bool have_data = ::access((data_dir + "/train-images-idx3-ubyte.gz").c_str(), R_OK) == 0;
    const std::string data = have_data ? " --data-dir " + data_dir : " --synthetic --train-samples 8192 --test-samples 1024";
    if (!have_data) std::printf("no Fashion-MNIST in %s: training on --synthetic data\n", data_dir.c_str());
    for (const char* amp : {"bf16", "fp16"}) {
      const std::string cmd = std::string(argv[2]) + " --nproc-per-node " + gpus + " --backend nccl --amp " + amp + data +
                              " --model cnn --max-steps 50 --reset --timeout 60 --out /tmp/ddp_gpu_trainer_" +
                              std::to_string(::getpid());
      std::printf("running: %s\n", cmd.c_str());
      std::fflush(stdout);
      if (std::system(cmd.c_str()) != 0) return 1;
    }
    return 0;
  }
  ddp::CommonFlags flags;
  flags.rank = 0;
  flags.world_size = 1;
  flags.backend = "nccl";
  flags.init = "file:///tmp/ddp_gpu_smoke_" + std::to_string(::getpid());
  flags.timeout_s = 30;
  ddp::set_log_identity(0, 1);
  const std::string store_file = flags.init->substr(7);
  const int code = ddp::guarded_main([&] {
    ddp::Group g = ddp::init_process_group(ddp::resolve_rank_info(flags));
    std::vector<torch::Tensor> t{torch::full({4}, 3.0f).to(ddp::device_for(g.info))};
    g.pg->allreduce(t)->wait();
    const float got = t[0].sum().item<float>();
    ddp::log("NCCL all-reduce on " + t[0].device().str() + ": sum " + std::to_string(got) + " (expected 12)");
    DDP_CHECK(got == 12.0f, "NCCL all-reduce returned " << got);
    return ddp::kExitOk;
  });  // the Group has left here (Note [Leaving the group]): NCCL's heartbeat monitor no longer polls the file
  std::remove(store_file.c_str());
  return code;
}
