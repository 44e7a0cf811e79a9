// provides: the shared command-line flags and their parser.
#include "common/cli.h"

#include <cstdlib>
#include <iostream>

#include "common/errors.h"

namespace ddp {

void add_common_flags(CLI::App& app, CommonFlags& f) {
  // A flag given twice: the last one wins, as with Python's argparse (and so a wrapper script can
  // append an override). Applies to every option added after this line, so call this first.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--rank", f.rank, "This process's rank, 0..world-size-1 [env RANK, SLURM_PROCID]");
  app.add_option("--world-size", f.world_size, "Number of processes in the group [env WORLD_SIZE, SLURM_NTASKS]");
  app.add_option("--master-addr", f.master_addr, "Host of rank 0, which hosts the store [env MASTER_ADDR; default 127.0.0.1]");
  app.add_option("--master-port", f.master_port, "TCP port of the store on the master [env MASTER_PORT; default 29500]");
  app.add_option("--backend", f.backend,
                 "Collective backend: gloo (CPU) or nccl (GPU) [default: nccl when this host has a GPU for every local rank, "
                 "else gloo; DDP_GPU_COUNT overrides the count]");
  app.add_option("--init", f.init, "Rendezvous: env:// (TCP store at master addr:port) or file:///path [default env://]");
  app.add_option("--timeout", f.timeout_s, "Seconds to wait for peers, the store and each collective [default 60]");
  app.add_flag("--explain-env", f.explain_env, "Print every resolved setting and where it came from, then exit");
}

void parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\nRun with --help for the flags.\n";
    std::exit(kExitUsage);
  }
}

}  // namespace ddp
