// defines: RankInfo and resolve_rank_info(): who am I, how many are we, where do we meet.
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/basics/cli.h"

namespace ddp {

// A value and where it came from ("--rank", "env RANK", "env SLURM_PROCID", "default").
template <class T>
struct Sourced {
  T value{};
  std::string source;
};

struct RankInfo {
  Sourced<int> rank, world_size;
  Sourced<int> local_rank, local_world_size, node_rank;
  Sourced<std::string> master_addr;
  Sourced<int> master_port;
  // true when a launcher (torchrun's agent, our spawner) already hosts the TCP store: then
  // rank 0 connects to it instead of creating one.
  Sourced<bool> external_store;
  std::string store_prefix;  // keys namespace inside an external store
  Sourced<std::string> backend, init;
  Sourced<double> timeout_s;
  std::string host;
  // Set when GPUs are visible but the default backend is Gloo anyway (too few for the local
  // ranks): the one log line that says why. See Note [Choosing the backend].
  std::string backend_note;
  std::string slurm;  // the Slurm job as its variables describe it (job id, restart, nodes), or ""
  // Nodes simulated on this one host (02_spawn --nnodes N tells its workers: env
  // DDP_SIMULATED_NODES): their ranks share the host's GPUs, which real nodes never do.
  int simulated_nodes = 1;

  // Which of this host's GPUs the rank takes: its local rank; with simulated nodes, its place
  // among all the host's ranks (node after node).
  int gpu_slot() const {
    return simulated_nodes > 1 ? node_rank.value * local_world_size.value + local_rank.value : local_rank.value;
  }
  // How many ranks run on this host, all nodes simulated on it included.
  int ranks_on_host() const { return local_world_size.value * simulated_nodes; }

  std::chrono::milliseconds timeout() const;
  bool file_init() const { return init.value.rfind("file://", 0) == 0; }
  std::string file_path() const { return init.value.substr(7); }
  // Where the store is, as the errors name it: the file:// URL, or address:port.
  std::string store_address() const {
    return file_init() ? init.value : master_addr.value + ":" + std::to_string(master_port.value);
  }
};

// Looks up an environment variable; a function so that tests can supply their own.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Which attempt of the run this process belongs to: TORCHELASTIC_RESTART_COUNT, set by torchrun
// and by 02_spawn --max-restarts (0 at first, +1 per restart); 0 when unset.
int restart_count(const EnvLookup& env = process_env());

// True for an environment variable that steers who a process is or where it meets its peers
// (RANK, WORLD_SIZE, LOCAL_*, GROUP_RANK, MASTER_*, GLOO_SOCKET_IFNAME, SLURM_*, TORCHELASTIC_*):
// what a launcher of its own (the tests, 06_slurm --local) must not pass on from its caller.
bool steers_rank_resolution(const std::string& name);

// How many GPUs this process may use, and who says so.
struct GpuCount {
  int count = 0;
  std::string source;
};
// Asked only when --backend is not given: counting GPUs starts CUDA, which a launcher that
// forks afterwards must not do (common/group/process_group.h has the real one, visible_gpus()).
using GpuQuery = std::function<GpuCount()>;

// DDP_GPU_COUNT=N when set (the GPU count the backend choice sees: tests prove the choice for
// 0, 1, 2 GPUs on hosts without one, and pin CPU behaviour on hosts with one), else
// `real_count()`. Throws UsageError for a value that is not a count.
GpuCount gpu_count_from(const EnvLookup& env, const std::function<int()>& real_count);

// Note [Choosing the backend]
// NCCL runs collectives on GPUs and wants one GPU per rank (it refuses two ranks on one GPU);
// Gloo runs anywhere, on the CPU. Without --backend a rank takes NCCL only when every local
// rank of its host gets a GPU of its own (GPUs >= local world size; with nodes simulated on one
// host, >= all of its ranks); otherwise Gloo on the CPU, so that `--nproc-per-node 2` on a
// laptop with one GPU trains instead of being refused.
// PyTorch's examples pick NCCL whenever CUDA is available, and stumble exactly there. The
// choice is made on each host, so the roll call checks that all ranks made the same one.
// Sets r.backend (value and the reason as its source) and r.backend_note.
void choose_default_backend(RankInfo& r, const GpuCount& gpus);

// Precedence, field by field: command-line flag > torchrun variables (RANK, WORLD_SIZE,
// LOCAL_RANK, ...) > Slurm variables (SLURM_PROCID, SLURM_NTASKS, ...) > defaults; the backend
// from --backend, else choose_default_backend() with `gpus`.
// Throws UsageError for a variable that does not parse.
RankInfo resolve_rank_info(const CommonFlags& flags, const EnvLookup& env, const GpuQuery& gpus);

// Throws UsageError naming the first inconsistency (rank >= world size, port out of range,
// unknown backend, ...). Checks only what can be checked without other processes.
void validate(const RankInfo& info);

// Every resolved value with its source, one per line: what --explain-env prints.
std::string explain(const RankInfo& info);

}  // namespace ddp
