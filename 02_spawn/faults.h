// defines: Fault and its flags (--fail-rank, --fail-mode, --straggle-ms): a worker of 02_spawn
// that fails on purpose, to watch the failure reported. See Note [Faults on purpose].
#pragma once
#include <optional>
#include <string>

#include "common/basics/cli.h"

// Declared, not included: process_group.h brings LibTorch's headers, and plan.cpp (through
// plan.h) compiles in 6 s without them, 17 s with them.
namespace ddp {
struct Group;
}

namespace spawn {

struct Fault {
  std::optional<int> rank;    // --fail-rank: the worker that fails
  std::string mode = "exit";  // exit | kill | hang | straggle
  int straggle_ms = 3000;
};

// Adds --fail-rank, --fail-mode and --straggle-ms to `app`.
void add_fault_flags(CLI::App& app, Fault& fault);
// Called by every worker once it joined `g`: in the worker of --fail-rank, once every rank has
// joined, does the fault, once (attempt 0 only, so that a restart passes). Returns the exit code
// the worker must return, or nothing to carry on.
std::optional<int> inject_fault(const Fault& fault, ddp::Group& g, int attempt);

}  // namespace spawn
