// provides: 02_spawn --link: the simulated nodes as hosts on shaped links (common/hosts/simulated_hosts).
#include "02_spawn/links.h"

#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace spawn {

// Note [Nodes on links]
// ~~~~~~~~~~~~~~~~~~~~~
// What --link changes in the launcher; the hosts themselves (namespaces, bridge, tbf) are
// Note [Nodes as hosts] in common/hosts/simulated_hosts.cpp:
//   * The plan: MASTER_ADDR is node 0's address (10.0.0.1), never loopback, so --master-addr is
//     refused: the launcher hosts the store inside node 0, as torchrun's agent does on the first node.
//   * Before the forks, the hosts are created (this process has one thread: they fork too).
//   * Each worker, just forked, enters its node's namespaces: network, host name, /etc/hosts.
//     From then on it is a process of that host, and says so in its "joined" line.
//   * The store is created inside node 0's network namespace, then the launcher comes back.
// Without --link every call here does nothing, and the launcher runs as on loopback.

void Links::add_flag(CLI::App& app) {
  app.add_option("--link", rate_, "Each node a host with its own address, on a link of this bandwidth (e.g. 100mbit, 1gbit); needs root");
}

void Links::plan(ddp::RankInfo& base, bool master_addr_given) {
  if (!rate_) return;
  bits_per_s_ = ddp::parse_link_rate(*rate_);
  if (master_addr_given) throw ddp::UsageError("--link: the store is on node 0's address; leave --master-addr out");
  base.master_addr = {ddp::SimulatedHosts::address(0), "--link: node 0's address"};
}

void Links::start(int nodes) {
  if (!rate_) return;
  hosts_ = std::make_unique<ddp::SimulatedHosts>(nodes, bits_per_s_);
  std::string names;
  for (int k = 0; k < nodes; ++k) names += (k ? ", " : "") + hosts_->name(k) + " " + hosts_->address(k);
  ddp::log(std::to_string(nodes) + " node(s) as hosts on " + ddp::describe_rate(bits_per_s_) + " links to one bridge: " + names);
}

bool Links::enter(int node) const { return !hosts_ || hosts_->enter(node); }

void Links::on_node0(const std::function<void()>& f) const { hosts_ ? hosts_->in_network_of(0, f) : f(); }

}  // namespace spawn
