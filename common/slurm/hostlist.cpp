// provides: Slurm host list and tasks-per-node expansion, with refusals that say what is wrong.
#include "common/slurm/hostlist.h"

#include <cctype>

#include "common/basics/errors.h"

namespace ddp {
namespace {

[[noreturn]] void refuse(const std::string& what, const std::string& list, const std::string& why) {
  throw UsageError("malformed Slurm " + what + " '" + list + "': " + why);
}

// Splits at commas outside brackets; checks that brackets pair up and never nest.
std::vector<std::string> split_items(const std::string& list) {
  std::vector<std::string> items(1);
  bool open = false;
  for (char c : list) {
    if (std::isspace(static_cast<unsigned char>(c))) refuse("node list", list, "it contains a space");
    if (c == '[' && open) refuse("node list", list, "nested '['");
    if (c == ']' && !open) refuse("node list", list, "']' without '['");
    if (c == '[' || c == ']') open = c == '[';
    if (c == ',' && !open) {
      items.emplace_back();
    } else {
      items.back() += c;
    }
  }
  if (open) refuse("node list", list, "'[' without ']'");
  for (const auto& item : items) {
    if (item.empty()) refuse("node list", list, "an empty host name (two commas, or one at an end)");
  }
  return items;
}

// "a,,b" -> "a" "" "b": every piece, empty ones too, for the callers to refuse.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> pieces;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1) {
    pieces.push_back(text.substr(start, comma - start));
  }
  pieces.push_back(text.substr(start));
  return pieces;
}

// "01-03,7" -> 01 02 03 7
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& list) {
  if (ranges.empty()) refuse("node list", list, "empty brackets");
  std::vector<std::string> out;
  for (const std::string& range : split_commas(ranges)) {
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    for (const std::string* n : {&lo, &hi}) {
      if (n->empty()) refuse("node list", list, "the range '" + range + "' has an empty bound");
      if (n->size() > 9) refuse("node list", list, "the number '" + *n + "' is too long");
      for (char c : *n) {
        if (!std::isdigit(static_cast<unsigned char>(c))) refuse("node list", list, "'" + range + "' is not a number or a range a-b");
      }
    }
    const long a = std::stol(lo), b = std::stol(hi);
    if (b < a) refuse("node list", list, "the range '" + range + "' goes down");
    if (static_cast<size_t>(b - a) >= kMaxHosts) refuse("node list", list, "more than " + std::to_string(kMaxHosts) + " hosts");
    for (long i = a; i <= b; ++i) {
      std::string num = std::to_string(i);
      if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // gpu[08-10]
      out.push_back(num);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  if (list.empty()) refuse("node list", list, "it is empty");
  std::vector<std::string> hosts;
  for (const std::string& item : split_items(list)) {
    // Each bracket group multiplies the names built so far by its numbers.
    std::vector<std::string> names{""};
    size_t at = 0;
    while (at < item.size()) {
      const size_t lb = item.find('[', at);
      const std::string text = item.substr(at, lb == std::string::npos ? std::string::npos : lb - at);
      for (auto& n : names) n += text;
      if (lb == std::string::npos) break;
      const size_t rb = item.find(']', lb);
      std::vector<std::string> grown;
      for (const auto& n : names) {
        for (const auto& num : expand_ranges(item.substr(lb + 1, rb - lb - 1), list)) grown.push_back(n + num);
      }
      if (hosts.size() + grown.size() > kMaxHosts) refuse("node list", list, "more than " + std::to_string(kMaxHosts) + " hosts");
      names.swap(grown);
      at = rb + 1;
    }
    hosts.insert(hosts.end(), names.begin(), names.end());
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& spec) {
  if (spec.empty()) refuse("tasks per node", spec, "it is empty");
  auto number = [&](const std::string& text) {
    if (text.empty() || text.size() > 6) refuse("tasks per node", spec, "'" + text + "' is not a count");
    for (char c : text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) refuse("tasks per node", spec, "'" + text + "' is not a count");
    }
    const int v = std::stoi(text);
    if (v < 1) refuse("tasks per node", spec, "a count of 0");
    return v;
  };
  std::vector<int> out;
  for (const std::string& item : split_commas(spec)) {
    const size_t paren = item.find('(');
    int times = 1;
    if (paren != std::string::npos) {  // "2(x3)": 2 tasks on each of 3 nodes
      if (item.compare(paren, 2, "(x") != 0 || item.back() != ')') refuse("tasks per node", spec, "'" + item + "' is not N or N(xM)");
      times = number(item.substr(paren + 2, item.size() - paren - 3));
    }
    const int count = number(item.substr(0, paren));
    if (out.size() + times > kMaxHosts) refuse("tasks per node", spec, "more than " + std::to_string(kMaxHosts) + " nodes");
    out.insert(out.end(), times, count);
  }
  return out;
}

}  // namespace ddp
