// defines: the count of the collectives a process group ran, for a check to read (exercises 01.2, 03.2, 05.2, 07.1).
#pragma once

#include "common/group/process_group.h"

namespace ddp {

// Note [Counted by the backend]
// A check that wants to know how many collectives a program ran cannot count what the program
// reports (a trace span is one line of code to fake). The backend numbers its collectives
// itself, as torch.distributed's init_process_group starts it doing (c10d's
// setSequenceNumberForGroup; Python reads it as _get_sequence_number_for_group): each
// collective (all-reduce, broadcast, barrier, ...) adds one. Sends and receives are not
// collectives and add nothing, so a ring of sends would go uncounted: the Gloo backend made
// while counting is ProcessGroupGloo itself with its all-reduce, broadcast, send and receive
// counted on the way in (CountedGloo below; the chapters call them through the base class, as
// they call Gloo's). With DDP_COUNT_COLLECTIVES=1 in the environment the program started with (read
// before main(), so a program that unsets it counts all the same), leaving prints one line:
//   [rank 0/3] the process group ran 23 collectives: 21 all-reduces of 2716 bytes in all, 0 sends, 0 receives, 0 broadcasts (DDP_COUNT_COLLECTIVES)
// and, on a rank that was the root of a broadcast, what it sent (a count says a broadcast ran,
// not what it carried):
//   [rank 0/3] as the root of its broadcasts this rank sent: 27055 (DDP_COUNT_COLLECTIVES)
// and, on a rank that sent, what its sends carried (chapter 07's rings are sends and receives):
//   [rank 0/2] its sends carried 32978320 bytes in all (DDP_COUNT_COLLECTIVES)
// Exercises 01.2's, 03.2's, 05.2's and 07.1's checks read them; without the variable nothing changes.

// Step 5's Gloo backend (make_backend, 01_join_group/main.cpp): counting as above when asked, else plain Gloo.
c10::intrusive_ptr<Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                      const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& opts);

// After the backend is made (init_process_group): with DDP_COUNT_COLLECTIVES=1, number from here.
void count_collectives_if_asked(Group& g);
// Before the backend shuts down (Group::destroy): the line above, when counting and no
// exception is unwinding.
void report_collective_count(const Group& g) noexcept;

}  // namespace ddp
