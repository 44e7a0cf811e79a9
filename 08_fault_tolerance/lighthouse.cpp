// provides: the lighthouse's tick over its store, and the replica's client (join, heartbeat, ask).
#include "08_fault_tolerance/lighthouse.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/error_file.h"

namespace ch08 {
namespace {

std::string get_text(c10d::Store& s, const std::string& key) {
  std::vector<uint8_t> v = s.get(key);
  return std::string(v.begin(), v.end());
}
void set_text(c10d::Store& s, const std::string& key, const std::string& value) {
  s.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}
c10::intrusive_ptr<c10d::TCPStore> connect_store(const std::string& host, int port, double timeout_s) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return c10::make_intrusive<c10d::TCPStore>(host, o);
}
struct NoQuorum : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(s * 1e6))); }

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> host_lighthouse_store(const std::string& host, int port) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(5);
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, o);
  } catch (const std::exception& e) {
    throw ddp::UsageError("the lighthouse cannot listen on port " + std::to_string(port) + ": " + ddp::short_what(e) +
                          " (another lighthouse holds it? pick another --port)");
  }
}

Lighthouse::Lighthouse(c10::intrusive_ptr<c10d::Store> store, std::string run, LighthouseOptions opts)
    : store_(std::move(store)), opts_(opts) {
  epoch_ = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  // The heartbeat listener, on a port the system picks, published in the store.
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error(std::string("the lighthouse's heartbeat listener: ") + std::strerror(errno));
  set_text(*store_, "run", run);
  set_text(*store_, "epoch", epoch_);
  set_text(*store_, "beat_port", std::to_string(ntohs(addr.sin_port)));
  store_->add("joins", 0);
}

Lighthouse::~Lighthouse() {
  for (const auto& [fd, beat] : beats_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Lighthouse::read_heartbeats(double now) {
  for (int fd; (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) beats_[fd] = Beat{};
  for (auto it = beats_.begin(); it != beats_.end();) {
    Beat& b = it->second;
    char bytes[256];
    ssize_t got = 0;
    bool moved = false, ended = false;
    while ((got = ::recv(it->first, bytes, sizeof(bytes), 0)) > 0) moved = true, b.buffer.append(bytes, static_cast<size_t>(got));
    ended = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    if (b.id.empty() && b.buffer.find('\n') != std::string::npos) {
      b.id = b.buffer.substr(0, b.buffer.find('\n'));
      closed_.erase(b.id);
    }
    if (!b.id.empty() && moved) state_.heartbeats[b.id] = now;
    if (!ended) {
      ++it;
      continue;
    }
    if (!b.id.empty()) closed_.insert(b.id), state_.heartbeats[b.id] = now - 1e9;  // lost at once: no timeout to wait
    ::close(it->first);
    it = beats_.erase(it);
  }
}

std::string Lighthouse::tick(double now) {
  for (const int64_t n = store_->add("joins", 0); joins_seen_ < n;) {
    const std::string id = get_text(*store_, "join/" + std::to_string(++joins_seen_));
    if (std::find(ids_.begin(), ids_.end(), id) == ids_.end()) ids_.push_back(id);
  }
  for (const std::string& id : ids_) {
    if (!store_->check({"ask/" + id})) continue;
    std::istringstream ask(get_text(*store_, "ask/" + id));
    int64_t seq = 0;
    Member m;
    m.replica_id = id;
    ask >> seq >> m.step >> m.commit_failures >> m.address;
    if (seq <= answered_seq_[id] || state_.asked.count(id)) continue;
    state_.asked[id] = {m, now}, pending_seq_[id] = seq;
    if (!closed_.count(id)) state_.heartbeats[id] = now;  // an ask is a heartbeat, but not from the dead
  }
  read_heartbeats(now);  // after the asks: a connection that closed wins over its last ask
  Decision d = quorum_compute(now, state_, opts_);
  if (!d.members) {  // a reason to wait is said once it has held for half a second: most pass sooner
    if (d.why != why_) why_ = d.why, why_since_ = now;
    if (state_.asked.empty() || now - why_since_ < 0.5 || said_ == why_) return "";
    return said_ = why_;
  }
  auto asked = state_.asked;
  const int64_t before = state_.quorum_id;
  Quorum q = issue(state_, *d.members);
  std::string line = "quorum " + std::to_string(q.id) + " (" + d.why + "):";
  for (const Member& m : q.members) {
    set_text(*store_, "answer/" + m.replica_id + "/" + std::to_string(pending_seq_[m.replica_id]), serialize(q));
    answered_seq_[m.replica_id] = pending_seq_[m.replica_id];
    line += " " + m.replica_id + "@" + std::to_string(m.step);
    asked.erase(m.replica_id);
  }
  for (auto& [id, ask] : asked) state_.asked[id] = {ask.first, now};  // not alive when issued: asks again
  why_.clear(), said_.clear();
  return q.id != before ? line : "";  // the same quorum again: nothing new to say
}

LighthouseClient::LighthouseClient(std::string host, int port, std::string run, std::string replica_id, std::string address,
                                   double connect_timeout_s, bool member)
    : host_(std::move(host)), run_(std::move(run)), id_(std::move(replica_id)), address_(std::move(address)), port_(port),
      connect_timeout_s_(connect_timeout_s), member_(member) {
  try {
    connect();
  } catch (const ddp::UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw ddp::UsageError("no lighthouse answers at " + host_ + ":" + std::to_string(port_) + " within " +
                          ddp::seconds(connect_timeout_s_) + " (" + ddp::short_what(e) +
                          "): start it first (08_fault_tolerance --lighthouse-only), or fix --lighthouse");
  }
  if (member_) beats_ = std::thread([this] { beat_loop(); });
}

LighthouseClient::~LighthouseClient() {
  stop_ = true;
  if (beats_.joinable()) beats_.join();
}

void LighthouseClient::connect() {
  auto ask = connect_store(host_, port_, connect_timeout_s_);
  const std::string run = get_text(*ask, "run");
  if (run != run_)
    throw ddp::UsageError("the lighthouse at " + host_ + ":" + std::to_string(port_) + " serves run '" + run + "', not '" + run_ +
                          "': a replica joins only its own run (--run)");
  const std::string epoch = get_text(*ask, "epoch");
  const int beat_port = std::stoi(get_text(*ask, "beat_port"));
  if (member_) set_text(*ask, "join/" + std::to_string(ask->add("joins", 1)), id_);
  std::lock_guard<std::mutex> lock(mu_);
  ask_store_ = ask, beat_port_ = beat_port, epoch_ = epoch;
}

void LighthouseClient::beat_loop() {
  int fd = -1, port = 0;
  while (!stop_) {
    int want;
    {
      std::lock_guard<std::mutex> lock(mu_);
      want = beat_port_;
    }
    if (fd >= 0 && want != port) ::close(fd), fd = -1;  // a lighthouse started again: its new listener
    if (fd < 0) {
      addrinfo hints{}, *found = nullptr;
      hints.ai_family = AF_INET, hints.ai_socktype = SOCK_STREAM;
      if (::getaddrinfo(host_.c_str(), std::to_string(want).c_str(), &hints, &found) == 0) {
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
          const std::string hello = id_ + "\n";
          if (::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) ::close(fd), fd = -1;
          port = want;
        } else if (fd >= 0) {
          ::close(fd), fd = -1;
        }
        ::freeaddrinfo(found);
      }
    }
    if (fd >= 0 && ::send(fd, ".", 1, MSG_NOSIGNAL) != 1) ::close(fd), fd = -1;  // reconnects next time
    sleep_s(0.1);
  }
  if (fd >= 0) ::close(fd);
}

Quorum LighthouseClient::ask(int64_t step, int64_t failures, double deadline_s) {
  const double start = ddp::monotonic_seconds();
  bool said = false;
  while (true) {
    try {
      const std::string key = "answer/" + id_ + "/" + std::to_string(++seq_);
      set_text(*ask_store_, "ask/" + id_,
               std::to_string(seq_) + " " + std::to_string(step) + " " + std::to_string(failures) + " " + address_);
      int64_t ended = -1;
      double ended_seen = -1;
      for (int polls = 0; !ask_store_->check({key}); ++polls) {
        if (ended_seen < 0 && polls % 50 == 0 && ask_store_->check({"ended"})) {
          ended = std::stoll(get_text(*ask_store_, "ended"));
          if (ended > step) ended_seen = ddp::monotonic_seconds();
        }
        // The run ended past our step. An answer the lighthouse wrote with the finishers' may still
        // be on its way to a process that stalled (local SGD's steps between syncs wait for no
        // one): a second's grace before saying the run ended without us.
        if (ended_seen >= 0 && ddp::monotonic_seconds() - ended_seen > 1) throw RunEnded(ended);
        if (ddp::monotonic_seconds() - start > deadline_s)
          throw NoQuorum("no quorum formed within " + ddp::seconds(deadline_s) +
                                   " (--quorum-deadline): fewer replicas than --min-replicas are alive");
        sleep_s(0.001);
      }
      if (said) ddp::log("the lighthouse at " + host_ + ":" + std::to_string(port_) + " is back: a new quorum");
      return parse_quorum(get_text(*ask_store_, key));
    } catch (const NoQuorum&) {
      throw;
    } catch (const RunEnded&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = ddp::short_what(e);
      if (!said) {
        ddp::log("the lighthouse at " + host_ + ":" + std::to_string(port_) + " does not answer (" + what + "): waiting up to " +
                 ddp::seconds(deadline_s) + " for it to come back");
        said = true;
      }
    }
    if (ddp::monotonic_seconds() - start > deadline_s)
      throw std::runtime_error("the lighthouse at " + host_ + ":" + std::to_string(port_) + " did not come back within " +
                               ddp::seconds(deadline_s) + " (--quorum-deadline)");
    sleep_s(0.2);
    try {
      connect();
    } catch (const ddp::UsageError&) {
      throw;
    } catch (const std::exception&) {
    }
  }
}

void LighthouseClient::finished(int64_t step) {
  try {
    set_text(*ask_store_, "ended", std::to_string(step));
  } catch (const std::exception&) {  // a lighthouse gone: nobody left to tell
  }
}

c10::intrusive_ptr<c10d::Store> LighthouseClient::group_store(const Quorum& q, int lane) {
  return c10::make_intrusive<c10d::PrefixStore>("group/" + group_name(q) + "/lane" + std::to_string(lane), ask_store_);
}

void LighthouseClient::follow(const std::string& epoch) {
  if (epoch != epoch_) connect();
}

}  // namespace ch08
