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
  torch::Tensor header = torch::tensor({s.step, s.position, static_cast<int64_t>(bytes.size())}, torch::kInt64);
  send(pg, header, to, kTag);
  int64_t sent = header.numel() * 8;
  for (const torch::Tensor& p : s.params) send(pg, p.detach(), to, kTag + 1), sent += p.numel() * p.element_size();
  torch::Tensor opt = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(opt.data_ptr(), bytes.data(), bytes.size());
  send(pg, opt, to, kTag + 2);
  return sent + static_cast<int64_t>(bytes.size());
}

int64_t recv_state(ddp::Backend& pg, int from, ReplicaState& s) {
  torch::Tensor header = torch::empty({3}, torch::kInt64);
  recv(pg, header, from, kTag);
  int64_t got = header.numel() * 8;
  for (torch::Tensor& p : s.params) {
    torch::NoGradGuard no_grad;
    torch::Tensor in = torch::empty_like(p);
    recv(pg, in, from, kTag + 1);
    p.copy_(in);  // in place: the model and the optimizer keep holding the same tensors
    got += p.numel() * p.element_size();
  }
  torch::Tensor opt = torch::empty({header[2].item<int64_t>()}, torch::kUInt8);
  recv(pg, opt, from, kTag + 2);
  load_optimizer_bytes(*s.optimizer, std::string(static_cast<const char*>(opt.data_ptr()), static_cast<size_t>(opt.numel())));
  s.step = header[0].item<int64_t>(), s.position = header[1].item<int64_t>();
  return got + opt.numel();
}

}  // namespace ch08
