// defines: a replica group of several ranks: its processes, its own group (05's DDP runs on it),
// the quorum its leader asks for, shared with the others; and the Gloo groups 08 forms.
#pragma once
#include <torch/torch.h>

#include "08_fault_tolerance/lighthouse.h"
#include "08_fault_tolerance/options.h"
#include "common/group/process_group.h"

namespace ch08 {

// Note [A replica group of several ranks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A replica group is what a lost node takes with it: --ranks-per-replica G processes on one host,
// which train as chapter 05's DDP among themselves (their own group, where nothing is fault
// tolerant) and as one member of the quorum across groups. This is torchft's shape (its hsdp
// component in torchft/torchx.py: a torchrun per replica group, the Manager's fault-tolerant
// collectives across groups). Lane k is the group of local rank k of every member, one per quorum:
// its all-reduce, vote and healing run G times side by side, rank k copying from the donor's rank k.
// The processes are named by replica and local rank: r1.0, r1.1.
//   - Only local rank 0, the leader, holds the lighthouse's heartbeat and asks for the quorum; it
//     writes the answer to the group's own store, where the others read it. The others reach the
//     lighthouse's store only to form their lanes. torchft's Manager does the same: on group rank
//     0 it starts a ManagerServer, which asks the lighthouse, and every rank asks that server
//     (torchft/manager.py).
//   - A step's gradient: 05's DDP averages it over the G ranks (each gradient times 1/G, then
//     summed); the lane's all-reduce sums the contributors', divided by their number after. So the
//     replay takes, for contributor j, the batches j*G .. j*G+G-1 of the step.
//   - The lanes must agree: lane 0's vote may pass while lane 1's failed (a lost group's rank 0
//     had voted before it was killed). So each rank's answer, after its lane's vote, is ANDed over
//     its own group before it acts: the group commits, heals and syncs as one, or not at all (agree()).
//   - A lost rank is a lost replica group: its group's collectives cannot finish. The process that
//     forked the ranks kills the rest and ends as killed (SIGKILL); the launcher then sees one lost
//     replica and may start another, under a new id. torchrun's agent, which torchft's hsdp starts
//     with --max_restarts, stops the group's workers too, then starts them again in place
//     (SimpleElasticAgent._invoke_run in torch/distributed/elastic/agent/server/api.py).
//   - --fault strikes the group's last rank (G-1): a rank that is not the leader, so the leader's
//     heartbeat goes on and the others find the loss by their collectives.

// Forks o.ranks_per_replica processes and returns, in each, its local rank; with one rank, returns
// 0 in this process. The parent never returns: once every rank has ended it exits 0, or 2 if a
// rank exited 2 (bad input); at the first other failure it kills the ranks left and itself.
int fork_ranks(const Options& o);

// The group of the replica's own ranks (a FileStore in --out; one rank: in memory).
ddp::Group inner_group(const Options& o, int local_rank);

// The leader asks the lighthouse for the next step's quorum and shares the answer; the others read
// it and follow the lighthouse's epoch (a lighthouse started again). Throws RunEnded on every rank
// when the run ended before this replica could join.
Quorum ask_together(ddp::Group& inner, LighthouseClient& lighthouse, int64_t step, int64_t failures, double deadline_s);

// True only if `ok` is true on every rank of the replica group (a MIN over it).
bool agree(ddp::Group& inner, bool ok);

// A Gloo group of `size` on `store`: a quorum's lane (a fresh prefix per quorum), or the replica
// group's own. Its collectives wait `timeout_s` for a silent peer. `host`: the lighthouse's
// (loopback: this machine's loopback device too; else GLOO_SOCKET_IFNAME's, or the default one).
c10::intrusive_ptr<ddp::Backend> new_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                           const std::string& host, double timeout_s);

}  // namespace ch08
