// provides: the shared command-line flags and their parser.
#include "common/basics/cli.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common/basics/errors.h"

namespace ddp {

// Note [Help that tells the truth]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A default written into an option's description by hand drifts: change the variable's initial
// value and the help goes on promising the old one. So a value default is never written by
// hand: CLI11 captures it from the variable itself, and --help shows it as "[default X]" at the
// end of the description. Defaults decided at run time (the backend, which depends on the GPUs;
// the master port, which torchrun's or Slurm's environment may set) are stated as a rule,
// "[default: ...]" with a colon, and tests/test_docs.cpp checks each rule against what the
// program really does; it also refuses a hand-written "[default X]" without the colon.
namespace {
class TrueDefaults : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string opts = CLI::Formatter::make_option_opts(opt);  // CLI11's " TYPE=default"
    const std::string shown = "=" + opt->get_default_str();
    if (const size_t at = opts.find(shown); !opt->get_default_str().empty() && at != std::string::npos) opts.erase(at, shown.size());
    return opts;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = CLI::Formatter::make_option_desc(opt);
    if (!opt->get_default_str().empty()) desc += " [default " + opt->get_default_str() + "]";
    return desc;
  }
};
}  // namespace

void show_true_defaults(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  app.formatter(std::make_shared<TrueDefaults>());
}

void add_common_flags(CLI::App& app, CommonFlags& f) {
  show_true_defaults(app);
  // A flag given twice: the last one wins, as with Python's argparse (and so a wrapper script can
  // append an override). Applies to every option added after this line, so call this first.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Unset flags stay std::nullopt (rank resolution falls back to the environment), so their
  // defaults are rules; tests/test_docs.cpp checks each against --explain-env.
  app.add_option("--rank", f.rank, "This process's rank, 0..world-size-1 [default: env RANK, else SLURM_PROCID, else 0]");
  app.add_option("--world-size", f.world_size, "Number of processes in the group [default: env WORLD_SIZE, else SLURM_NTASKS, else 1]");
  app.add_option("--master-addr", f.master_addr,
                 "Host of rank 0, which hosts the store [default: env MASTER_ADDR, else the first host of Slurm's node list, else 127.0.0.1]");
  app.add_option("--master-port", f.master_port,
                 "TCP port of the store on the master [default: env MASTER_PORT, else 15000 + Slurm job id % 10000, else 29500]");
  app.add_option("--backend", f.backend,
                 "Collective backend: gloo (tensors on the CPU) or nccl (each rank on GPU cuda:<local rank>) [default: nccl when "
                 "this host has a GPU for every local rank, else gloo; DDP_GPU_COUNT overrides the count]");
  app.add_option("--init", f.init, "Rendezvous: env:// (TCP store at master addr:port) or file:///path [default: env://]");
  app.add_option("--timeout", f.timeout_s, "Seconds to wait for peers, the store and each collective [default: 60]");  // checked by validate()
  app.add_flag("--explain-env", f.explain_env, "Print every resolved setting and where it came from, then exit");
}

const CLI::Validator& finite_number() {
  static const CLI::Validator v(
      [](std::string& text) {
        double x = 0;
        return CLI::detail::lexical_cast(text, x) && std::isfinite(x) ? std::string() : "not a finite number: " + text;
      },
      "");  // nothing added to --help: the flag's own text and type say enough
  return v;
}

// Note [Leaving without LibTorch's destructors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A program that links LibTorch spends a fixed cost on starting (the loader binds the symbols of
// its 287 libraries; LibTorch registers thousands of operators) and another on ending: exit()
// runs LibTorch's static destructors, which take every operator out of the dispatcher again and
// free its tables, in a process that is about to be gone. So every program, once its flags are
// being parsed (after every static constructor ran), asks exit() to call leave_now() first: it
// flushes what the C and C++ streams hold and ends the process with exit()'s status, skipping
// the destructors registered before it (LibTorch's, and our own globals', none of which holds
// anything unwritten: logs and metrics are written as they happen, checkpoints renamed into
// place). Objects a program builds later (function statics) are still destroyed first, and
// every object of main() before exit() is called. The ranks 05_ddp forks end in _exit() already.
void leave_now(int status) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(status);
}
namespace {
void leave_at_exit(int status, void*) { leave_now(status); }
}  // namespace

void parse_flags(CLI::App& app, int argc, char** argv) {
  static const bool leaves_quickly = ::on_exit(leave_at_exit, nullptr) == 0;
  (void)leaves_quickly;
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
