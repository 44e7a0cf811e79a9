// defines: CommonFlags and add_common_flags(): the one definition of the flags every program shares.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace ddp {

// A flag left unset stays std::nullopt, so that rank resolution can fall back to the
// environment (torchrun, then Slurm) and say where each value came from.
struct CommonFlags {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> backend;
  std::optional<std::string> init;
  std::optional<double> timeout_s;
  bool explain_env = false;
};

void add_common_flags(CLI::App& app, CommonFlags& flags);

// --help shows each option's default from the variable the option writes to (Note [Help that
// tells the truth]): call before adding options. add_common_flags() calls it.
void show_true_defaults(CLI::App& app);

// A number flag must be finite: CLI11's Range and PositiveNumber let "nan" through (every
// comparison with NaN is false), to fail later inside an optimizer, with exit 1. Check it first
// on every floating-point flag, so that its message is the one shown for "inf" too:
// ->check(ddp::finite_number())->check(CLI::PositiveNumber).
const CLI::Validator& finite_number();

// Parses argv. --help prints and exits 0; any bad flag prints why and exits 2. From here on,
// exit() leaves through leave_now().
void parse_flags(CLI::App& app, int argc, char** argv);

// Ends the process with `status`, the C and C++ streams flushed, without the static destructors
// exit() would run (Note [Leaving without LibTorch's destructors]).
[[noreturn]] void leave_now(int status);

}  // namespace ddp
