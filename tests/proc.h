// defines: run real processes with a deadline and capture what they print (for multi-rank tests).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ddp_test {

struct ProcSpec {
  std::vector<std::string> argv;            // argv[0]: a program in the build folder, or a path
  std::map<std::string, std::string> env;   // added to a clean environment (see run_all)
  double start_delay_s = 0;                 // started this long after the first process
  int signal = 0;                           // if set: sent to the process ...
  double signal_after_s = 0;                // ... this long after it started
  std::string signal_once_printed;          // ... and, if set, once it has printed this: ready for it
  bool real_gpus = false;                   // true: the program counts the host's GPUs itself (see run_all)
};

struct ProcResult {
  int exit_code = -1;    // -1 when killed by a signal
  int term_signal = 0;   // the signal that ended it, 0 if it exited
  bool timed_out = false;
  double seconds = 0;    // from its start to its end
  std::string output;    // stdout and stderr together
};

// Starts every process, waits at most `deadline_s` for all of them, SIGKILLs what is left.
// The environment is the test's own (with its pinned CPU kernels, kernels.h) minus every variable
// that steers rank resolution (RANK, WORLD_SIZE, MASTER_*, LOCAL_*, SLURM_*, TORCHELASTIC_*), plus
// DDP_GPU_COUNT=0 (CPU behaviour, also on a GPU host) unless spec.env sets it or spec.real_gpus,
// plus spec.env, whose variables replace the test's own.
std::vector<ProcResult> run_all(const std::vector<ProcSpec>& specs, double deadline_s);
ProcResult run_one(const ProcSpec& spec, double deadline_s);

// True on a host with an NVIDIA GPU (/dev/nvidia0): tests whose expectation depends on it say so.
bool gpu_host();
// The NVIDIA GPUs of this host (/dev/nvidia0, /dev/nvidia1, ...).
int gpu_count();
// Why the real-Slurm tests cannot run here ("" when they can): DDP_SLURM_UNAVAILABLE (set by
// scripts/test.sh), no SLURM_CONF, no answer from sinfo, fewer than 2 nodes up.
std::string slurm_skip_reason();
// Path of a program built next to the tests.
std::string bin(const std::string& name);
// A TCP port that is free right now.
int free_port();
// One byte written to a socket whose peer has closed: write()'s errno (EPIPE), 0 if it wrote.
// With SIGPIPE at its default action the process dies in that write (Note [A peer gone mid-write]).
int write_to_a_gone_peer();
// A fresh empty folder under /tmp, inside this process's own (Note [The tests' scratch folders]
// in proc.cpp): removed when its tests end, unless one failed or keep_scratch_folders() was called.
std::string temp_dir();
void keep_scratch_folders();
// How often `needle` occurs in `hay`.
int count(const std::string& hay, const std::string& needle);
// a followed by b.
std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b);
// A whole file ("" if missing).
std::string read_text(const std::string& path);
// Every distinct "params fingerprint <16 hex>" the trainer printed in `output`.
std::set<std::string> fingerprints(const std::string& output);
// The trainer's small run: 2048 training images, 32 per rank per step (32 steps per epoch at 2
// ranks), validation on 1001, into `out`.
std::vector<std::string> small_run(const std::string& out);
// 05_ddp --nproc-per-node `world` with `args`, in the environment given (added to run_one's).
ProcResult trainer(int world, const std::vector<std::string>& args, double deadline_s = 120,
                   const std::map<std::string, std::string>& env = {});
// The same with 07_fsdp.
ProcResult fsdp_trainer(int world, const std::vector<std::string>& args, double deadline_s = 120,
                        const std::map<std::string, std::string>& env = {});

}  // namespace ddp_test
