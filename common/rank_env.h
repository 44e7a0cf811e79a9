// defines: RankInfo and resolve_rank_info(): who am I, how many are we, where do we meet.
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.h"

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
  std::string slurm;  // the Slurm job as its variables describe it (job id, restart, nodes), or ""

  std::chrono::milliseconds timeout() const;
  bool file_init() const { return init.value.rfind("file://", 0) == 0; }
  std::string file_path() const { return init.value.substr(7); }
};

// Looks up an environment variable; a function so that tests can supply their own.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// True for an environment variable that steers who a process is or where it meets its peers
// (RANK, WORLD_SIZE, LOCAL_*, GROUP_RANK, MASTER_*, GLOO_SOCKET_IFNAME, SLURM_*, TORCHELASTIC_*):
// what a launcher of its own (the tests, 06_slurm --local) must not pass on from its caller.
bool steers_rank_resolution(const std::string& name);

// Precedence, field by field: command-line flag > torchrun variables (RANK, WORLD_SIZE,
// LOCAL_RANK, ...) > Slurm variables (SLURM_PROCID, SLURM_NTASKS, ...) > defaults.
// Throws UsageError for a variable that does not parse.
RankInfo resolve_rank_info(const CommonFlags& flags, const EnvLookup& env = process_env());

// Throws UsageError naming the first inconsistency (rank >= world size, port out of range,
// unknown backend, ...). Checks only what can be checked without other processes.
void validate(const RankInfo& info);

// Every resolved value with its source, one per line: what --explain-env prints.
std::string explain(const RankInfo& info);

}  // namespace ddp
