// defines: a Markdown page cut into its fenced blocks (with the markers above each), the shell commands inside a block, and the pages a page links; header-only, for
// the README tests (Note [Walking the READMEs] in test_walk.cpp; Note [Checked examples] in
// test_docs.cpp reads the same `<!-- checked -->` marker).
#pragma once
#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ddp_test::readme {

// One fenced block: ``` + info string, its lines, and what stands right above it.
struct Fence {
  int line = 0;                      // 1-based line of the opening fence
  std::string info;                  // "sh", "console", "text", ... ("" when the fence has none)
  std::vector<std::string> body;     // the lines between the fences
  std::vector<std::string> markers;  // the HTML comment lines directly above the fence, top to bottom
  std::string label;                 // the reason of a `<!-- not run: ... -->` marker above ("" if none)
  int label_line = 0;                // that marker's line
};

// The marker of a block the tests do not run, among the markers right above it, e.g.
// <!-- not run: needs a GPU -->
// Invisible, as every marker: the page says in its own words what the block needs.
inline const std::regex& label_pattern() {
  static const std::regex re(R"(^<!-- not run: (.+) -->\s*$)");
  return re;
}

// Whether one of the problems a page check found holds `what` (the checks' own tests).
inline bool mentions(const std::vector<std::string>& problems, const std::string& what) {
  return std::any_of(problems.begin(), problems.end(), [&](const std::string& p) { return p.find(what) != std::string::npos; });
}

inline std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Every fenced block of a page (``` or ~~~ fences, at most 3 spaces of indent), in order. An
// unclosed fence runs to the end of the page, as CommonMark reads it.
inline std::vector<Fence> fences(const std::string& text) {
  const std::vector<std::string> lines = lines_of(text);
  const std::regex open(R"(^ {0,3}(`{3,}|~{3,})\s*([^`\s]*).*$)");
  const std::regex comment(R"(^<!--.*-->\s*$)");
  std::vector<Fence> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(lines[i], m, open)) continue;
    Fence f;
    f.line = static_cast<int>(i) + 1;
    f.info = m[2];
    const std::string fence = m[1];
    size_t above = i;
    while (above > 0 && std::regex_match(lines[above - 1], comment)) --above;
    for (size_t k = above; k < i; ++k) {
      f.markers.push_back(lines[k]);
      std::smatch lm;
      if (f.label.empty() && std::regex_match(lines[k], lm, label_pattern())) {
        f.label = lm[1];
        f.label_line = static_cast<int>(k) + 1;
      }
    }
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      // A closing fence: up to 3 spaces, the same character at least as often, nothing after it.
      const std::string t = trim(lines[j]);
      if (lines[j].find_first_not_of(' ') <= 3 && t.size() >= fence.size() && t.find_first_not_of(fence[0]) == std::string::npos) break;
      f.body.push_back(lines[j]);
    }
    out.push_back(f);
    i = j;
  }
  return out;
}

// The options of the first marker `<!-- <name> -->` or `<!-- <name>: a b=c -->` above a block,
// split at blanks; nullopt when there is no such marker.
inline std::optional<std::vector<std::string>> marker_options(const Fence& f, const std::string& name) {
  const std::regex re("^<!-- " + name + "(:(.*))? -->\\s*$");
  for (const std::string& m : f.markers) {
    std::smatch sm;
    if (!std::regex_match(m, sm, re)) continue;
    std::vector<std::string> opts;
    std::istringstream in(sm[2].str());
    for (std::string o; in >> o;) opts.push_back(o);
    return opts;
  }
  return std::nullopt;
}

// A shell line cut at its comment: (code, comment text after '#'), quote-aware: a '#' starts a
// comment at the start of a word outside quotes, as bash reads it.
inline std::pair<std::string, std::string> split_comment(const std::string& line) {
  bool single = false, dbl = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (single) {
      single = c != '\'';
    } else if (c == '\\') {
      ++i;
    } else if (dbl) {
      dbl = c != '"';
    } else if (c == '\'') {
      single = true;
    } else if (c == '"') {
      dbl = true;
    } else if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      return {line.substr(0, i), line.substr(i + 1)};
    }
  }
  return {line, ""};
}

// One command of a block as a learner types it: a line, and the lines a trailing `\` continues.
struct Command {
  int line = 0;             // README line of its first line
  std::string text;         // what bash runs: comments dropped, continuations kept, a trailing & removed
  bool background = false;  // it ended with `&`
  std::optional<int> exit;  // a trailing comment `# exit N`: the exit code the text promises
};

// The commands of a block: every line of ```sh/```bash/```shell (blank and comment-only lines
// skipped), or the `$ ` lines of ```console (and a checked block, whatever its fence says).
// `first_line` is the README line of body[0].
inline std::vector<Command> commands(const std::vector<std::string>& body, int first_line, bool console) {
  std::vector<Command> out;
  bool continued = false;
  const std::regex exit_comment(R"(^\s*exit (\d+)\b)");
  for (size_t i = 0; i < body.size(); ++i) {
    std::string raw = body[i];
    if (!continued) {
      if (console) {
        if (raw.rfind("$ ", 0) != 0) continue;  // what the commands print
        raw = raw.substr(2);
      }
      if (trim(split_comment(raw).first).empty()) continue;  // blank, or only a comment
      out.push_back({first_line + static_cast<int>(i), "", false, std::nullopt});
    }
    Command& c = out.back();
    auto [code, comment] = split_comment(raw);
    std::smatch m;
    if (std::regex_search(comment, m, exit_comment)) c.exit = std::stoi(m[1]);
    code = code.substr(0, code.find_last_not_of(" \t") + 1);
    continued = !code.empty() && code.back() == '\\';
    c.text += code + (continued ? "\n" : "");
  }
  for (Command& c : out) {
    std::string t = trim(c.text);
    if (t.size() >= 2 && t.back() == '&' && t[t.size() - 2] != '&') {
      c.background = true;
      t.pop_back();
    }
    c.text = trim(t);
  }
  return out;
}

// The repository pages a page links, `[text](path.md)` or `(path.md#part)`, relative to the
// page's folder, in the order of their first link (links inside fences do not count).
inline std::vector<std::string> linked_pages(const std::string& page, const std::string& text) {
  std::vector<std::string> out;
  std::string prose;
  const std::vector<std::string> lines = lines_of(text);
  std::vector<bool> fenced(lines.size(), false);
  for (const Fence& f : fences(text)) {
    for (size_t k = f.line - 1; k < std::min(lines.size(), static_cast<size_t>(f.line) + f.body.size() + 1); ++k) fenced[k] = true;
  }
  for (size_t k = 0; k < lines.size(); ++k) {
    if (!fenced[k]) prose += lines[k] + "\n";
  }
  const std::regex link(R"(\]\(([^()\s#]+\.md)(#[^()\s]*)?\))");
  const std::filesystem::path folder = std::filesystem::path(page).parent_path();
  for (auto it = std::sregex_iterator(prose.begin(), prose.end(), link); it != std::sregex_iterator(); ++it) {
    const std::string target = (*it)[1];
    if (target.find("://") != std::string::npos) continue;
    const std::string rel = (folder / target).lexically_normal().string();
    if (rel.rfind("..", 0) == 0) continue;  // outside the repository
    if (std::find(out.begin(), out.end(), rel) == out.end()) out.push_back(rel);
  }
  return out;
}

}  // namespace ddp_test::readme
