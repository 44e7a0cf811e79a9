// defines: SimulatedHosts: simulated nodes as real hosts on one machine (network namespaces on a
// bridge, links shaped to a rate); parse_link_rate(). See Note [Nodes as hosts].
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ddp {

// "100mbit", "1gbit", "2.5Gbit/s", "500kbit" -> bits per second. Throws UsageError otherwise.
double parse_link_rate(const std::string& text);
// 1e8 -> "100 Mbit/s", for messages.
std::string describe_rate(double bits_per_s);

class SimulatedHosts {
 public:
  // Creates `nodes` hosts node0, node1, ... with addresses 10.0.0.1, 10.0.0.2, ... on one
  // bridge, each link shaped to `bits_per_s` in both directions. Call it while this process
  // has one thread (it forks). Throws UsageError naming the reason when this host does not
  // allow it (not root, no `ip`/`tc`, no namespaces).
  SimulatedHosts(int nodes, double bits_per_s);
  ~SimulatedHosts();  // the holders are killed: the kernel removes every namespace, link and bridge
  SimulatedHosts(const SimulatedHosts&) = delete;
  SimulatedHosts& operator=(const SimulatedHosts&) = delete;

  int nodes() const { return static_cast<int>(holders_.size()); }
  static std::string name(int node) { return "node" + std::to_string(node); }
  static std::string address(int node) { return "10.0.0." + std::to_string(node + 1); }
  double bits_per_s() const { return bits_per_s_; }

  // In a child just forked (one thread): becomes a process of `node`: its network, host name
  // and /etc/hosts. Only system calls (safe after fork); returns false with errno set.
  bool enter(int node) const;
  // Runs `f` on this thread inside node's network namespace, then comes back: a socket
  // opened by `f` (the launcher's store) stays in that node.
  void in_network_of(int node, const std::function<void()>& f) const;
  // The same for a program started with posix_spawn: put this before its argv (nsenter).
  std::vector<std::string> enter_command(int node) const;

 private:
  void release();
  double bits_per_s_;
  pid_t switch_ = -1;                  // holds the bridge's namespace
  std::vector<pid_t> holders_;         // one per node: holds its namespaces
  std::vector<int> net_fd_, uts_fd_, mnt_fd_;
  int home_net_fd_ = -1;
  std::string cwd_;
};

}  // namespace ddp
