// defines: one step's averaging (zeros from a replica still healing) and its commit vote.
#pragma once
#include <torch/torch.h>

#include <functional>

#include "common/group/compat.h"

namespace ch08 {

// Note [Zeros until healed, and a vote]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every member of the quorum joins the step's all-reduce, or the others would wait for it; a
// member that does not contribute sends zeros: one that was behind at the quorum (in torchft its
// healing runs beside the step, so its gradient comes from stale parameters; here healing ends
// before the forward, but who contributes is still decided from the quorum alone, before any
// transfer), or a spare (--contributors, the README's "global batch"). So the sum holds the
// contributors' gradients only, and it is divided by their number, not by the quorum's size:
// sum first, divide after, as torchft's DDP does and as chapter 03 does (PyTorch's DDP divides
// each gradient first; at 2 contributors both are exact, a division by 2 being exact).
// A step is applied only if every member says its all-reduce succeeded: an all-reduce that
// failed on one member may have left partial sums on another, so a MIN over yes/no decides, and
// a member that cannot even vote (its group broke) says no: all apply the step or none does.
// torchft's vote spans one replica group only (Manager.should_commit: "Different replica groups
// may return different values"); a group that did not commit is a step behind at the next quorum
// and heals. The failure is latched: the group is not used again, and the next ask tells the
// lighthouse, which forms a new one.
// Returns false if the all-reduce failed (a peer died, or the group's timeout passed).
// `between` runs after the first gradient's all-reduce (where --fault allreduce strikes).
bool average_gradients(ddp::Backend& pg, std::vector<torch::Tensor>& grads, bool contributes, int contributors,
                       const std::function<void()>& between = {});
// True only if every member's `ok` is true and the vote itself succeeded.
bool commit_vote(ddp::Backend& pg, bool ok);

}  // namespace ch08
