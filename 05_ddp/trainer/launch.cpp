// provides: --nproc-per-node through chapter 02's launcher, linked in (the object of its main.cpp,
// main() renamed: ddp_renamed_main in CMakeLists.txt).
#include "05_ddp/trainer/launch.h"

#include <string>
#include <vector>

#include "02_spawn/exec_worker.h"
#include "common/basics/errors.h"
#include "common/basics/paths.h"

extern "C" int ddp_chapter02_main(int argc, char** argv);  // 02_spawn/main.cpp's main(), renamed (CMakeLists.txt)

namespace ddp {

int fork_ranks(int argc, char** argv, const CommonFlags& flags, TrainerOptions& o, const std::function<int()>& one_rank) {
  const int nproc = *o.nproc_per_node;
  if (flags.rank) throw UsageError("--nproc-per-node starts the ranks itself: drop --rank");
  if (flags.world_size && *flags.world_size != nproc) {
    throw UsageError("--world-size " + std::to_string(*flags.world_size) + " differs from --nproc-per-node " +
                     std::to_string(nproc) + " (one machine: they are the same)");
  }
  std::vector<std::string> args{"02_spawn", "--nproc-per-node", std::to_string(nproc)};
  if (flags.timeout_s) args.insert(args.end(), {"--timeout", std::to_string(*flags.timeout_s)});
  if (flags.master_addr) args.insert(args.end(), {"--master-addr", *flags.master_addr});
  if (flags.master_port) args.insert(args.end(), {"--master-port", std::to_string(*flags.master_port)});
  if (!o.on_failure.empty()) args.insert(args.end(), {"--on-failure", o.on_failure});
  if (o.max_restarts) args.insert(args.end(), {"--max-restarts", std::to_string(*o.max_restarts)});
  // The command the workers would start: this program with the same flags, minus --nproc-per-node.
  // Each child runs one_rank instead, with the flags this process parsed: the same ones.
  args.insert(args.end(), {"--", this_program()});
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc-per-node=", 0) == 0) continue;
    args.push_back(a);
  }
  spawn::run_workers_in_place([&o, &one_rank] {
    o.nproc_per_node.reset();  // a rank, not a launcher (in the child: the launcher's copy keeps it)
    return one_rank();
  });
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  return ddp_chapter02_main(static_cast<int>(args.size()), cargs.data());
}

}  // namespace ddp
