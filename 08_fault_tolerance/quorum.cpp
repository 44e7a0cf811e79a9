// provides: quorum_compute(), issue(), assignment() and the quorum's one-line form.
#include "08_fault_tolerance/quorum.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

namespace ch08 {

Decision quorum_compute(double now, const LighthouseState& s, const LighthouseOptions& o) {
  std::set<std::string> alive;
  for (const auto& [id, when] : s.heartbeats)
    if (now - when < o.heartbeat_timeout_s) alive.insert(id);
  std::vector<Member> candidates;
  double first_asked = now;
  for (const auto& [id, ask] : s.asked) {
    if (!alive.count(id)) continue;
    candidates.push_back(ask.first);
    first_asked = std::min(first_asked, ask.second);
  }  // std::map: already sorted by replica id
  const size_t n = candidates.size();
  const std::string counts = "[" + std::to_string(n) + " of " + std::to_string(s.asked.size()) + " asking are alive, " +
                             std::to_string(alive.size()) + " alive]";
  const bool at_max = std::any_of(candidates.begin(), candidates.end(), [&](const Member& c) { return c.step >= s.max_step; });
  if (!at_max && n > 0)
    return {std::nullopt, "waiting: no candidate is at step " + std::to_string(s.max_step) + " to heal the others from " + counts};
  if (!s.previous && n < static_cast<size_t>(o.first))
    return {std::nullopt, "waiting for the first " + std::to_string(o.first) + " replicas " + counts};
  if (s.previous) {
    bool all_back = true;
    for (const Member& m : s.previous->members) {
      all_back = all_back && std::any_of(candidates.begin(), candidates.end(), [&](const Member& c) { return c.replica_id == m.replica_id; });
    }
    if (all_back) return {candidates, "fast path: every member of the last quorum asked again " + counts};
  }
  if (n < static_cast<size_t>(o.min_replicas))
    return {std::nullopt, "waiting: " + std::to_string(n) + " asking, the minimum is " + std::to_string(o.min_replicas) + " " + counts};
  if (n <= alive.size() / 2) return {std::nullopt, "waiting: asking must be more than half of the alive " + counts};
  if (n < alive.size() && now - first_asked < o.join_timeout_s)
    return {std::nullopt, "waiting for " + std::to_string(alive.size() - n) + " alive replica(s) until the join timeout " + counts};
  return {candidates, (n == alive.size() ? "every alive replica asked " : "the join timeout passed ") + counts};
}

Quorum issue(LighthouseState& s, std::vector<Member> members) {
  bool changed = !s.previous || s.previous->members.size() != members.size();
  for (size_t k = 0; !changed && k < members.size(); ++k) changed = members[k].replica_id != s.previous->members[k].replica_id;
  for (const Member& m : members) changed = changed || m.commit_failures > 0;
  if (changed) ++s.quorum_id;
  for (const Member& m : members) s.max_step = std::max(s.max_step, m.step);
  Quorum q{s.quorum_id, std::move(members)};
  s.previous = q;
  s.asked.clear();
  return q;
}

Assignment assignment(const Quorum& q, const std::string& replica_id) {
  Assignment a;
  a.replica_world = static_cast<int>(q.members.size());
  std::vector<int> sources, healers;
  for (const Member& m : q.members) a.max_step = std::max(a.max_step, m.step);
  for (int r = 0; r < a.replica_world; ++r) {
    if (q.members[r].replica_id == replica_id) a.replica_rank = r;
    (q.members[r].step == a.max_step ? sources : healers).push_back(r);
  }
  if (a.replica_rank < 0) throw std::runtime_error("replica " + replica_id + " is not in quorum " + std::to_string(q.id));
  for (size_t k = 0; k < healers.size(); ++k) {
    const int from = sources[k % sources.size()];
    if (healers[k] == a.replica_rank) a.heal = true, a.heal_from = from;
    if (from == a.replica_rank) a.heal_to.push_back(healers[k]);
  }
  return a;
}

std::string serialize(const Quorum& q) {
  std::ostringstream out;
  out << q.id;
  for (const Member& m : q.members) out << ';' << m.replica_id << ',' << m.step << ',' << m.address << ',' << m.commit_failures;
  return out.str();
}

Quorum parse_quorum(const std::string& text) {
  Quorum q;
  std::istringstream in(text);
  std::string field;
  std::getline(in, field, ';');
  q.id = std::stoll(field);
  while (std::getline(in, field, ';')) {
    std::istringstream parts(field);
    Member m;
    std::string step, failures;
    std::getline(parts, m.replica_id, ','), std::getline(parts, step, ','), std::getline(parts, m.address, ',');
    std::getline(parts, failures, ',');
    m.step = std::stoll(step), m.commit_failures = std::stoll(failures);
    q.members.push_back(m);
  }
  return q;
}

}  // namespace ch08
