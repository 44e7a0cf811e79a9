// provides: send_state()/recv_state(): a replica's whole state, over the quorum's group.
#include "08_fault_tolerance/heal.h"

#include <sstream>

namespace ch08 {
namespace {

constexpr int kTag = 800;  // apart from any tag a collective of this chapter uses

void send(ddp::Backend& pg, torch::Tensor t, int to, int tag) {
  std::vector<torch::Tensor> one{t.contiguous()};
  pg.send(one, to, tag)->wait();
}
void recv(ddp::Backend& pg, torch::Tensor t, int from, int tag) {
  std::vector<torch::Tensor> one{t};
  pg.recv(one, from, tag)->wait();
}

void send_bytes(ddp::Backend& pg, const std::string& bytes, int to, int tag) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  send(pg, t, to, tag);
}
std::string recv_bytes(ddp::Backend& pg, int64_t size, int from, int tag) {
  torch::Tensor t = torch::empty({size}, torch::kUInt8);
  recv(pg, t, from, tag);
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(size));
}
// Received into `into`, in place (the model and the optimizers keep holding the same tensors).
int64_t recv_tensors(ddp::Backend& pg, std::vector<torch::Tensor>& into, int from, int tag) {
  int64_t got = 0;
  for (torch::Tensor& p : into) {
    torch::NoGradGuard no_grad;
    torch::Tensor in = torch::empty_like(p);
    recv(pg, in, from, tag);
    p.copy_(in);
    got += p.numel() * p.element_size();
  }
  return got;
}

}  // namespace

std::string optimizer_bytes(const torch::optim::Optimizer& optimizer) {
  std::ostringstream blob;
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  archive.save_to(blob);
  return blob.str();
}

void load_optimizer_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  std::istringstream blob(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(blob);
  optimizer.load(archive);
}

int64_t send_state(ddp::Backend& pg, int to, ReplicaState& s) {
  const std::string bytes = optimizer_bytes(*s.optimizer);
  const std::string outer = s.diloco ? optimizer_bytes(*s.diloco->outer) : "";
  torch::Tensor header = torch::tensor({s.step, s.position, static_cast<int64_t>(bytes.size()), static_cast<int64_t>(outer.size())}, torch::kInt64);
  send(pg, header, to, kTag);
  int64_t sent = header.numel() * 8;
  for (const torch::Tensor& p : s.params) send(pg, p.detach(), to, kTag + 1), sent += p.numel() * p.element_size();
  send_bytes(pg, bytes, to, kTag + 2);
  if (s.diloco) {
    for (const torch::Tensor& g : s.diloco->global) send(pg, g, to, kTag + 3), sent += g.numel() * g.element_size();
    send_bytes(pg, outer, to, kTag + 4);
  }
  return sent + static_cast<int64_t>(bytes.size() + outer.size());
}

int64_t recv_state(ddp::Backend& pg, int from, ReplicaState& s) {
  torch::Tensor header = torch::empty({4}, torch::kInt64);
  recv(pg, header, from, kTag);
  const int64_t inner_size = header[2].item<int64_t>(), outer_size = header[3].item<int64_t>();
  int64_t got = header.numel() * 8 + recv_tensors(pg, s.params, from, kTag + 1);
  load_optimizer_bytes(*s.optimizer, recv_bytes(pg, inner_size, from, kTag + 2));
  if (s.diloco) {
    got += recv_tensors(pg, s.diloco->global, from, kTag + 3);
    load_optimizer_bytes(*s.diloco->outer, recv_bytes(pg, outer_size, from, kTag + 4));
  }
  s.step = header[0].item<int64_t>(), s.position = header[1].item<int64_t>();
  return got + inner_size + outer_size;
}

}  // namespace ch08
