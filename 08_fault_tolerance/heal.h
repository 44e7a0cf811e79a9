// defines: healing: a replica behind the quorum copies a peer's state over the network.
#pragma once
#include <torch/torch.h>

#include "08_fault_tolerance/local_sgd.h"
#include "common/group/compat.h"

namespace ch08 {

// Note [Healing from a peer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A replica that joins late, or comes back, is behind: the quorum's highest step is ahead of
// its own. Chapter 05 would load a checkpoint from a file; here it copies the state from a
// member at that step, over the quorum's own group (send/recv), before the step's forward: only
// the donor waits for it, the other members go on to their forward. torchft's Manager sends the
// same state by a transport of its own (HTTP by default: torchft/checkpointing/), beside the
// step. The state is everything a step reads: the parameters, the optimizer's state (momentum buffers, step
// counts: serialized by LibTorch), the step count and the data position, and under DiLoCo the
// global parameters and the outer optimizer's state. Sent in place: the parameters arrive in the
// tensors the model already holds.
struct ReplicaState {
  std::vector<torch::Tensor> params;
  torch::optim::Optimizer* optimizer = nullptr;
  int64_t step = 0;      // committed steps
  int64_t position = 0;  // samples of the stream consumed by committed steps
  Diloco* diloco = nullptr;  // under DiLoCo (Note [DiLoCo]): its global parameters and outer optimizer
};

// An optimizer's state as bytes (LibTorch's archive), and back: what healing sends, and what the
// launcher's replay copies from one replica to another.
std::string optimizer_bytes(const torch::optim::Optimizer& optimizer);
void load_optimizer_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes);

// Both return the bytes that crossed the network. Errors (a peer gone) throw.
int64_t send_state(ddp::Backend& pg, int to, ReplicaState& s);
int64_t recv_state(ddp::Backend& pg, int from, ReplicaState& s);

}  // namespace ch08
