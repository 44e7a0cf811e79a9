// defines: expand_hostlist() and expand_tasks_per_node(): Slurm's compressed lists, written out.
#pragma once
#include <string>
#include <vector>

namespace ddp {

// Note [Slurm host lists]
// Slurm hands a job its nodes in a compressed form: SLURM_JOB_NODELIST="gpu[01-04,07],login3".
// Rank 0's address is the first host of that list, so every rank must write it out the same way.
// Relying on `scontrol show hostnames` for this made every node a world of one where scontrol was
// missing (pytorch#107021); the grammar is small enough to own:
//   list   := item (',' item)*               commas inside brackets belong to the brackets
//   item   := text ('[' ranges ']' text)*    several bracket groups multiply: r[1-2]n[1-2] is 4 hosts
//   ranges := range (',' range)*
//   range  := digits | digits '-' digits     the width of the first number is kept: [08-10] -> 08 09 10
// Anything else (unbalanced or nested brackets, an empty item or range, a descending range,
// a letter in a range, a space) is refused with UsageError naming the list and the fault.

// "gpu[01-02],cpu7" -> gpu01 gpu02 cpu7. At most kMaxHosts hosts.
std::vector<std::string> expand_hostlist(const std::string& list);
constexpr size_t kMaxHosts = 1'000'000;

// SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1 (tasks on each node, in node order).
std::vector<int> expand_tasks_per_node(const std::string& spec);

}  // namespace ddp
