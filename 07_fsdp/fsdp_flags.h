// defines: 07's own flags (--prefetch, --collectives) beside 05's trainer
// flags, and the refusal of 05's flags for what 07 does not do.
#pragma once
#include <CLI/CLI.hpp>

#include "07_fsdp/fsdp.h"

namespace ch07 {

struct FsdpFlags {
  int prefetch = 1;  // Note [Prefetch]
  Collectives collectives = Collectives::kRing;
};

void add_fsdp_flags(CLI::App& app, FsdpFlags& f);

// 05's trainer flags that compose its extras (its DDP class's options, a rank that skips steps,
// drills, traces; the kill and the straggler faults 07 keeps): given to 07, each is refused by
// name (exit 2) rather than quietly ignored. So is --collectives
// c10d where LibTorch's Gloo lacks the two collectives (1.13).
void refuse_what_07_does_not_do(const CLI::App& app, const FsdpFlags& f);

// For the log: "the ring's two halves", ...
std::string describe(Collectives c);

}  // namespace ch07
