// defines: Links, 02_spawn's --link RATE: each simulated node a host of its own, on a link of
// that bandwidth (root). See Note [Nodes on links] and, for the hosts, Note [Nodes as hosts].
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/basics/cli.h"
#include "common/hosts/simulated_hosts.h"
#include "common/launch/rank_env.h"

namespace spawn {

class Links {
 public:
  // Adds --link to `app`.
  void add_flag(CLI::App& app);
  bool on() const { return rate_.has_value(); }
  // Step 1, the plan: the store is on node 0's address. Refuses a bad rate or a --master-addr.
  void plan(ddp::RankInfo& base, bool master_addr_given);
  // Before the forks: creates the hosts (root only) and says which. Nothing without --link.
  void start(int nodes);
  // In a worker just forked: becomes a process of its node. True without --link; false, with
  // errno set, when it could not.
  bool enter(int node) const;
  // Runs `f` in node 0's network (the launcher's store listens there), or here without --link.
  void on_node0(const std::function<void()>& f) const;

 private:
  std::optional<std::string> rate_;
  double bits_per_s_ = 0;
  std::unique_ptr<ddp::SimulatedHosts> hosts_;
};

}  // namespace spawn
