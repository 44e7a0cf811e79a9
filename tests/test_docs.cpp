// The docs tell the truth: the READMEs' expected outputs checked against real runs (Note [Checked
// examples]), and every program's --help against the defaults it really uses.
//
// Note [Checked examples]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Every Markdown page of the repository is read (markdown_files(): found, not listed, so pages
// moved to docs/ or added beside a chapter are covered). A block is checked when the line before
// its opening fence is an HTML comment `<!-- checked -->` (invisible on GitHub), optionally
// `<!-- checked: exit=137 timeout=60 slurm root may=REGEX -->`; `root` blocks need root (network
// namespaces) and are left out, saying so, without it; `may` names printed lines that a run may
// or may not print, as timing decides (a survivor that notices a failure before the launcher
// stops it; Slurm's own srun lines during a requeue): they are left out of the comparison on
// both sides; `\s` stands for a blank.
// The block opens with the command lines, `$ ...` (a trailing `\` continues one), and the rest
// is what they print, whole: every line, in order. The README walk (Note [Walking the READMEs] in
// test_walk.cpp) runs its commands where a learner runs them, in its copy of the repository after
// the blocks before it, and gives what they printed, command after command, to compare_walked();
// blocks marked `slurm` run in Slurm.ReadmeJobLogsMatchRealJobs, from a folder whose entries link
// to the repository's (so `./build-cpu/05_ddp` and `06_slurm/...` work; `runs/` is the folder's
// own). Either way with the tests' environment (no rank variables, DDP_GPU_COUNT=0). Compared:
//   - line by line after masking what legitimately varies: ports, pids, host names, measured
//     durations (decimals, "in 12s", "ETA 0:14", "... ago"), samples/s, the overlap share,
//     dates, Slurm job ids; runs of blanks count as one. Everything else — the lines, their
//     number, losses, accuracies, fingerprints, the checks' verdicts — must be equal;
//   - per process: lines that start with a tag (`[rank 1/4]`, `[launcher]`) belong to that
//     process, untagged lines to the tag before them; each process's lines must come in the
//     README's order, but how processes interleave is up to the scheduler;
//   - the exit code (`exit=N`, default 0).
// Absolute paths into the folder print as /home/you/ddp-course/... (kExampleCheckout).
// A mismatch fails with a diff naming the README and the line of every expected line that is
// missing or different, then the whole output as printed.
// The blocks were recorded from the cpu flavour (Debian's LibTorch 1.13 on OpenBLAS) that
// scripts/run.sh builds; another LibTorch prints other floating-point digits, so other builds
// skip and say so. They were recorded on the kernels the test binaries pin (Note [CPU kernels and
// the recorded figures] in kernels.cpp); where a block's process cannot run those (the CPU, or a
// variable choosing others: recorded_figures_cannot_hold()), the figures that move with them
// (figure_pattern(): losses, accuracies, fingerprints, a check's |diff|) are masked on both sides;
// a block that shows such figures runs twice more, each in a folder of its own, and each process
// must print the same figures both times, and the test prints which recorded figures it did not
// compare, how many moved, and why: never silently. Blocks marked `slurm` run under a real Slurm
// only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels.h"
#include "proc.h"
#include "checked_blocks.h"
#include "pages.h"
#include "readme_blocks.h"

using namespace ddp_test;
namespace fs = std::filesystem;
namespace rb = ddp_test::readme;
using namespace ddp_test::pages;

namespace {

struct Block {
  std::string readme;  // relative to the repository's root
  int line = 0;        // of the first command line
  std::string script;  // the commands, one per line
  std::vector<std::pair<int, std::string>> expected;  // (README line, text)
  int exit_code = 0;
  double timeout_s = 120;
  bool slurm = false;
  bool root = false;  // needs root (02_spawn --link): left out without it
  std::optional<std::regex> may;  // printed lines that match may be absent from the README (timing decides)
  bool optional(const std::string& line) const { return may && std::regex_search(line, *may); }
};

// Where the READMEs' examples pretend the repository is, in absolute paths a program prints.
const std::string kExampleCheckout = "/home/you/ddp-course";


// The pages the checked examples lived in before they were found rather than listed.
const std::vector<std::string> kChapterReadmes = {"README.md",           "01_join_group/README.md",  "02_spawn/README.md",
                                                  "03_manual_allreduce/README.md", "04_grad_hooks/README.md", "05_ddp/README.md",
                                                  "06_slurm/README.md"};

std::vector<Block> read_blocks(const std::string& readme, const std::string& root = DDP_SOURCE_DIR) {
  std::ifstream in(root + "/" + readme);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<Block> blocks;
  const std::regex marker(R"(^<!-- checked(:(.*))? -->\s*$)");
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(lines[i], m, marker)) continue;
    Block b{readme, static_cast<int>(i) + 3};
    std::istringstream opts(m[2].str());
    for (std::string o; opts >> o;) {
      if (o.rfind("exit=", 0) == 0) b.exit_code = std::stoi(o.substr(5));
      else if (o.rfind("timeout=", 0) == 0) b.timeout_s = std::stod(o.substr(8));
      else if (o == "slurm") b.slurm = true;
      else if (o == "root") b.root = true;
      else if (o.rfind("may=", 0) == 0) b.may.emplace(o.substr(4));
      else ADD_FAILURE() << readme << ":" << i + 1 << ": unknown option '" << o << "' in the marker";
    }
    EXPECT_EQ(lines[i + 1].rfind("```", 0), 0u) << readme << ":" << i + 2 << ": a checked marker must be followed by a ``` block";
    size_t j = i + 2;
    bool continued = false;
    for (; j < lines.size() && (continued || lines[j].rfind("$ ", 0) == 0); ++j) {
      const std::string cmd = continued ? lines[j] : lines[j].substr(2);
      b.script += cmd + "\n";
      continued = !cmd.empty() && cmd.back() == '\\';
    }
    EXPECT_FALSE(b.script.empty()) << readme << ":" << i + 2 << ": a checked block opens with its command, '$ ...'";
    for (; j < lines.size() && lines[j].rfind("```", 0) != 0; ++j) {
      if (!b.optional(lines[j])) b.expected.emplace_back(static_cast<int>(j) + 1, lines[j]);
    }
    blocks.push_back(b);
    i = j;
  }
  return blocks;
}

// What legitimately varies between runs, replaced by a placeholder on both sides.
std::string mask(std::string s) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(\s+)"), " "},
      {std::regex(R"(\b(\d{1,3}(\.\d{1,3}){3}|localhost):\d+)"), "$1:<port>"},
      {std::regex(R"(\]:\d+)"), "]:<port>"},  // Gloo's "[127.0.0.1]:48289"
      {std::regex(R"(\bpid:? \d+)"), "pid <pid>"},
      {std::regex(R"(\bhost [A-Za-z0-9][\w.-]*)"), "host <host>"},
      {std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"), "<date>"},
      {std::regex(R"(\b(job|JOB|STEP) \d+(\.\d+)?)"), "$1 <job>"},
      {std::regex(R"(\b(runs/06_slurm/|ddp-cpu-)\d+)"), "$1<job>"},
      {std::regex(R"(\b\d+\.\d+ ?(ms|s)\b)"), "<time>"},
      {std::regex(R"(\bin \d+s\b)"), "in <time>"},
      {std::regex(R"(\b\d+(\.\d+)?s ago\b)"), "<time> ago"},
      {std::regex(R"(\bETA \d+:\d\d\b)"), "ETA <time>"},
      {std::regex(R"(\b[\d.]+ samples/s\b)"), "<n> samples/s"},
      {std::regex(R"(\boverlap: [\d.]+%)"), "overlap: <n>%"},
      {std::regex(R"(RSS now [\d.]+ MiB, at its peak [\d.]+ MiB)"), "RSS now <n> MiB, at its peak <n> MiB"},
      // 02_spawn's root-cause table: rank node local PID +time ...
      {std::regex(R"(^ ?(\d+ (\* )?\d+ \d+ )\d+ \S+ )"), "$1<pid> <time> "},
  };
  for (const auto& [re, with] : rules) s = std::regex_replace(s, re, with);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (!s.empty() && s.front() == ' ') s.erase(0, 1);
  return s;
}

// The figures that move with the CPU's kernels (Note [CPU kernels and the recorded figures] in
// kernels.cpp): losses, accuracies, fingerprints, a check's measured |diff| and its loss went
// down "a -> b". Group 1 is what names the figure, group 2 the figure.
const std::regex& figure_pattern() {
  static const std::regex re(R"((loss|accuracy|fingerprint|\|diff\| =|down:|->) ([0-9a-f]{16}|\d+\.\d+(e[-+]?\d+)?%?))");
  return re;
}

// The figures of a line, "loss 0.2615", in order.
std::vector<std::string> figures_of(const std::string& line) {
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(line.begin(), line.end(), figure_pattern()); it != std::sregex_iterator(); ++it) {
    out.push_back(it->str());
  }
  return out;
}

// The process a line belongs to: its leading tag, or the last tag seen. With `figures` false (the
// CPU's kernels are not those recorded), the figures are masked too.
struct Line {
  int readme_line;  // 0 for printed lines
  std::string text, masked;
};
std::map<std::string, std::vector<Line>> by_process(const std::vector<std::pair<int, std::string>>& lines, bool figures = true) {
  std::map<std::string, std::vector<Line>> streams;
  std::string tag;
  const std::regex tagged(R"(^(\[[^\]]+\]))");
  for (const auto& [n, text] : lines) {
    std::smatch m;
    if (std::regex_search(text, m, tagged)) tag = m[1];
    const std::string masked = mask(text);
    streams[tag].push_back({n, text, figures ? masked : std::regex_replace(masked, figure_pattern(), "$1 <figure>")});
  }
  return streams;
}

// Every figure each process printed, in its order.
std::map<std::string, std::vector<std::string>> figures_by_process(const std::map<std::string, std::vector<Line>>& streams) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [tag, lines] : streams) {
    for (const Line& l : lines) {
      for (const std::string& f : figures_of(l.text)) out[tag].push_back(f);
    }
  }
  return out;
}

// A readable diff of one process's lines: expected (README) against printed, by their longest
// common subsequence; "" when equal.
std::string diff(const std::string& readme, const std::vector<Line>& want, const std::vector<Line>& got) {
  const size_t n = want.size(), m = got.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = want[i].masked == got[j].masked ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::ostringstream out;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && want[i].masked == got[j].masked) {
      ++i, ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out << "  " << readme << ":" << want[i].readme_line << ": - " << want[i].text << "\n";
      ++i;
    } else {
      out << "  " << readme << " (printed, not in the README):  + " << got[j].text << "\n";
      ++j;
    }
  }
  return out.str();
}

// A folder whose entries link to the repository's, with build-cpu pointing at this build and a
// runs/ of its own.
std::string work_folder() {
  const std::string dir = temp_dir();
  for (const auto& e : fs::directory_iterator(DDP_SOURCE_DIR)) {
    const std::string name = e.path().filename();
    if (name == "runs" || name.rfind("build", 0) == 0 || name == ".git") continue;
    fs::create_symlink(e.path(), dir + "/" + name);
  }
  fs::create_symlink(DDP_BIN_DIR, dir + "/build-cpu");
  return dir;
}

// Why this build cannot reproduce the README's figures, or "".
std::string skip_reason() {
  const std::string bin_dir = DDP_BIN_DIR;
  if (fs::path(bin_dir).filename() != "build-cpu") {
    return "the READMEs' outputs were recorded from the cpu flavour's build-cpu (Debian's LibTorch 1.13, OpenBLAS); this build is " +
           bin_dir + ", whose floating-point digits may differ";
  }
  return "";
}

// What one checked block did against its README: `report` is "" when they agree; `notice` says
// which recorded figures were not compared and why ("" where the recorded figures hold).
struct BlockCheck {
  std::string report, notice, output;
};

// Runs one checked block, with the tests' environment plus `kernels` (variables that choose CPU
// kernels), and compares it with its README. Where the recorded figures cannot hold on these
// kernels, the figures are masked, a block that shows any runs twice and each process must print
// the same figures both times (Note [Checked examples]).
// What a block printed, by process: its lines but those it may leave out, with the absolute
// paths into the folder `dir` it ran in read as the README's example checkout.
std::map<std::string, std::vector<Line>> printed_by_process(const Block& b, const std::string& output, const std::string& dir,
                                                            bool figures) {
  std::vector<std::pair<int, std::string>> printed;
  std::istringstream lines(output);
  for (std::string l; std::getline(lines, l);) {
    for (size_t at; (at = l.find(dir)) != std::string::npos;) l.replace(at, dir.size(), kExampleCheckout);
    if (!b.optional(l)) printed.emplace_back(0, l);
  }
  return by_process(printed, figures);
}

// The README's lines of `b` against those printed, process by process: "" when they agree.
std::string compare(const Block& b, const std::map<std::string, std::vector<Line>>& got, bool figures) {
  const auto want = by_process(b.expected, figures);
  std::map<std::string, bool> tags;
  for (const auto& [tag, _] : want) tags[tag] = true;
  for (const auto& [tag, _] : got) tags[tag] = true;
  std::string report;
  for (const auto& [tag, _] : tags) {
    const auto w = want.count(tag) ? want.at(tag) : std::vector<Line>{};
    const auto g = got.count(tag) ? got.at(tag) : std::vector<Line>{};
    report += diff(b.readme, w, g);
  }
  return report;
}

BlockCheck check_block(const Block& b, const std::map<std::string, std::string>& kernels = {}) {
  const std::string unlike = recorded_figures_cannot_hold(kernels);
  auto run = [&](ProcResult& r) {
    const std::string dir = work_folder();
    ProcSpec spec{{"/bin/bash", "-c", "cd " + dir + " || exit 99\n" + b.script}, kernels};
    if (const char* conf = std::getenv("SLURM_CONF"); b.slurm && conf) spec.env["SLURM_CONF"] = conf;  // the tests' env drops SLURM_*
    r = run_one(spec, b.timeout_s);
    fs::remove_all(dir);
    return printed_by_process(b, r.output, dir, unlike.empty());
  };
  BlockCheck c;
  ProcResult r;
  const auto want = by_process(b.expected, unlike.empty()), got = run(r);
  c.output = r.output;
  c.report = compare(b, got, unlike.empty());
  const int code = r.timed_out ? -2 : r.term_signal ? 128 + r.term_signal : r.exit_code;
  if (code != b.exit_code) {
    c.report += "  exit code " + std::to_string(code) + (r.timed_out ? " (timed out)" : "") + ", the README says " +
                std::to_string(b.exit_code) + "\n";
  }
  const auto recorded = figures_by_process(want);
  if (unlike.empty() || recorded.empty()) return c;  // nothing printed moves with the kernels
  // Other kernels: what they print must at least be the same twice.
  ProcResult again;
  const auto first = figures_by_process(got), second = figures_by_process(run(again));
  int n = 0, moved = 0;
  std::string examples;  // the first few that moved: "fingerprint bbff0abd97303d08 as 2c90347cca59adc3"
  for (const auto& [tag, figs] : recorded) {
    for (size_t i = 0; i < figs.size(); ++i, ++n) {
      const std::string here = first.count(tag) && i < first.at(tag).size() ? first.at(tag)[i] : "";
      if (here == figs[i]) continue;
      if (++moved <= 3) examples += (moved > 1 ? ", " : "") + tag + " " + figs[i] + " as " + here.substr(here.rfind(' ') + 1);
    }
  }
  for (const auto& [tag, figs] : first) {
    const auto other = second.count(tag) ? second.at(tag) : std::vector<std::string>{};
    if (figs != other) {
      c.report += "  " + tag + " printed other figures in a second run on the same kernels (" + std::to_string(figs.size()) + " then " +
                  std::to_string(other.size()) + "): runs are not reproducible here\n";
    }
  }
  c.notice = b.readme + ":" + std::to_string(b.line) + ": " + std::to_string(n) + " recorded figures not compared, " +
             std::to_string(moved) + " of them printed otherwise here" + (moved ? " (" + examples + (moved > 3 ? ", ..." : "") + ")" : "") +
             ", because " + unlike +
             "; compared instead: every line with its figures masked, the checks' verdicts and tolerances, the exit code, and a "
             "second run, which printed the same figures";
  return c;
}

// Runs every checked block marked `slurm` (the others are run by the walk: Note [Walking the
// READMEs] in test_walk.cpp) and reports each mismatch; returns how many blocks ran.
int check_slurm_readmes() {
  int ran = 0;
  for (const std::string& readme : markdown_files()) {
    for (const Block& b : read_blocks(readme)) {
      if (!b.slurm) continue;
      if (b.root && ::geteuid() != 0) {
        std::cout << readme << ":" << b.line << ": left out: the example needs root (network namespaces)\n";
        continue;
      }
      ++ran;
      const BlockCheck c = check_block(b);
      if (!c.notice.empty()) std::cout << c.notice << "\n";
      if (!c.report.empty()) {
        ADD_FAILURE() << readme << ":" << b.line << ": the expected output differs from a real run of\n"
                      << b.script << c.report << "the whole output:\n"
                      << c.output;
      }
    }
  }
  return ran;
}

}  // namespace

namespace ddp_test::checked {

std::optional<Compared> compare_walked(const std::string& root, const std::string& page, int first_command_line,
                                       const std::string& printed) {
  for (const Block& b : read_blocks(page, root)) {
    if (b.line != first_command_line) continue;
    Compared c;
    if (const std::string why = skip_reason(); !why.empty()) {
      c.notice = page + ":" + std::to_string(b.line) + ": output not compared: " + why;
      c.compared = false;
      return c;
    }
    const std::string unlike = recorded_figures_cannot_hold({});
    c.report = compare(b, printed_by_process(b, printed, root, unlike.empty()), unlike.empty());
    if (!unlike.empty()) {  // the figures masked above; are they at least the same twice?
      const BlockCheck again = check_block(b);
      c.report += again.report;
      c.notice = again.notice;
    }
    return c;
  }
  return std::nullopt;
}

}  // namespace ddp_test::checked

TEST(Readme, MasksWhatVariesAndKeepsWhatMustNot) {
  EXPECT_EQ(mask("[launcher] store on 127.0.0.1:45391 (port chosen by the OS)"), "[launcher] store on 127.0.0.1:<port> (port chosen by the OS)");
  EXPECT_EQ(mask("error on host vm (pid 5226): 1 of 4"), "error on host <host> (pid <pid>): 1 of 4");
  EXPECT_EQ(mask("  2   * 1     0      5229     0.082s   signal 9 (Killed)"), "2 * 1 0 <pid> <time> signal 9 (Killed)");
  EXPECT_EQ(mask("  1     0     1      18524    10s      exit 1"), "1 0 1 <pid> <time> exit 1");
  EXPECT_EQ(mask("Connection closed by peer [127.0.0.1]:48289"), "Connection closed by peer [127.0.0.1]:<port>");
  EXPECT_EQ(mask("step 200/1407 mean loss 0.8109 lr 0.0493 1973 samples/s ETA 1:18"), "step 200/1407 mean loss 0.8109 lr 0.0493 <n> samples/s ETA <time>");
  EXPECT_EQ(mask("all 2 workers exited 0 in 116s"), mask("all 2 workers exited 0 in 0.12s"));
  // Fixed figures stay: a timeout that the command sets, losses, accuracies, fingerprints.
  EXPECT_NE(mask("timeout 60s"), mask("timeout 30s"));
  EXPECT_NE(mask("loss 0.2615"), mask("loss 0.2616"));
  EXPECT_NE(mask("accuracy 88.98%"), mask("accuracy 88.99%"));
  EXPECT_NE(mask("params fingerprint dc2be592c96fd13f"), mask("params fingerprint dc2be592c96fd13e"));
  EXPECT_NE(mask("ranks 1, 2 never joined"), mask("ranks 1, 3 never joined"));
}

TEST(Readme, DiffNamesTheReadmeLineAndToleratesOnlyInterleaving) {
  const std::vector<std::pair<int, std::string>> readme = {{10, "[launcher] start"}, {11, "[rank 0/2] a"}, {12, "[rank 1/2] b"},
                                                           {13, "[rank 0/2] c"}};
  const auto want = by_process(readme);
  // Another interleaving of the same processes' lines: equal.
  const auto shuffled = by_process({{0, "[launcher] start"}, {0, "[rank 1/2] b"}, {0, "[rank 0/2] a"}, {0, "[rank 0/2] c"}});
  for (const auto& [tag, lines] : want) EXPECT_EQ(diff("R.md", lines, shuffled.at(tag)), "") << tag;
  // One process's own order changed, and a line changed: both named by their README line.
  const auto wrong = by_process({{0, "[launcher] start"}, {0, "[rank 0/2] c"}, {0, "[rank 0/2] a"}, {0, "[rank 1/2] B"}});
  EXPECT_NE(diff("R.md", want.at("[rank 0/2]"), wrong.at("[rank 0/2]")).find("R.md:11: - [rank 0/2] a"), std::string::npos);
  EXPECT_NE(diff("R.md", want.at("[rank 1/2]"), wrong.at("[rank 1/2]")).find("R.md:12: - [rank 1/2] b"), std::string::npos);
}

// A learner's CPU whose kernels are not the recorded ones (an x86-64 without AVX2, arm64, or a
// variable set otherwise) still passes the README checks, on what holds there, and is told which
// figures were left out and why. Shown with kernels this CPU runs but the recording did not use:
// OpenBLAS's Sandybridge ones (AVX, no FMA) and oneDNN's SSE4.1 ones, on 03's first example,
// whose figures must really move for the test to mean anything.
TEST(Readme, OnOtherKernelsTheChecksCompareWhatStillHoldsAndSaySo) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::map<std::string, std::string> other = {{"OPENBLAS_CORETYPE", "Sandybridge"}, {"DNNL_MAX_CPU_ISA", "SSE41"}};
  const std::vector<Block> blocks = read_blocks("03_manual_allreduce/README.md");
  ASSERT_FALSE(blocks.empty());
  const BlockCheck c = check_block(blocks[0], other);
  EXPECT_EQ(c.report, "") << c.output;
  std::cout << c.notice << "\n";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(c.notice, m, std::regex(R"(: (\d+) recorded figures not compared, (\d+) of them printed otherwise here( \(.+\))?, because )")))
      << c.notice;
  EXPECT_NE(c.notice.find("because " + recorded_figures_cannot_hold(other) + "; compared instead: "), std::string::npos) << c.notice;
  EXPECT_GT(std::stoi(m[2]), 0) << "Sandybridge's kernels printed every recorded figure: this test shows nothing\n" << c.output;
  // Where the recorded figures hold, one figure that is not the README's is still caught.
  if (!recorded_figures_cannot_hold().empty()) return;
  Block altered = blocks[0];
  for (auto& [n, text] : altered.expected) {
    if (text.find("loss went down") != std::string::npos) {
      text = std::regex_replace(text, std::regex(R"(\d\.\d{4})"), "9.9999", std::regex_constants::format_first_only);
      break;
    }
  }
  EXPECT_NE(check_block(altered).report, "") << "a changed figure went unnoticed on the recorded kernels";
}

TEST(Readme, FiguresAreMaskedOnlyWhereTheKernelsDiffer) {
  const std::vector<std::pair<int, std::string>> lines = {
      {1, "[rank 0/2] check: single process on the global batch: max |diff| = 2.98e-08 <= 1e-05: OK"},
      {2, "[rank 0/2] check: the loss went down: 0.2615 -> 0.1072: OK"},
      {3, "[rank 0/2] validation after step 50: loss 0.6746, accuracy 75.93% (10000 images)"},
      {4, "[rank 0/2] params fingerprint 0d4f5d72408c6553 (bit-identical runs print the same)"}};
  const auto other = by_process(lines, /*figures=*/false).at("[rank 0/2]");
  EXPECT_EQ(other[0].masked, "[rank 0/2] check: single process on the global batch: max |diff| = <figure> <= 1e-05: OK");
  EXPECT_EQ(other[1].masked, "[rank 0/2] check: the loss went down: <figure> -> <figure>: OK");
  EXPECT_EQ(other[2].masked, "[rank 0/2] validation after step 50: loss <figure>, accuracy <figure> (10000 images)");
  EXPECT_EQ(other[3].masked, "[rank 0/2] params fingerprint <figure> (bit-identical runs print the same)");
  EXPECT_EQ(figures_by_process(by_process(lines)).at("[rank 0/2]"),
            (std::vector<std::string>{"|diff| = 2.98e-08", "down: 0.2615", "-> 0.1072", "loss 0.6746", "accuracy 75.93%",
                                      "fingerprint 0d4f5d72408c6553"}));
  // The recorded kernels: every figure compared.
  EXPECT_EQ(by_process(lines).at("[rank 0/2]")[3].masked, "[rank 0/2] params fingerprint 0d4f5d72408c6553 (bit-identical runs print the same)");
}

// The job logs of the pages (docs/slurm.md), from sbatch under a real Slurm (label slurm).
TEST(Slurm, ReadmeJobLogsMatchRealJobs) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  if (const std::string why = slurm_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  EXPECT_GT(check_slurm_readmes(), 0) << "no checked block marked slurm";
}

// ---- The pages hold together: every page found, every relative link leads somewhere ----

namespace {

}  // namespace

// The checked examples and the link check read every page of the repository: the chapters'
// READMEs among them, and nothing from a build folder or the virtualenv.
TEST(Docs, EveryPageOfTheRepositoryIsFound) {
  const std::vector<std::string> pages = markdown_files();
  ASSERT_FALSE(pages.empty());
  EXPECT_EQ(pages.front(), "README.md");
  for (const std::string& readme : kChapterReadmes) {
    EXPECT_NE(std::find(pages.begin(), pages.end(), readme), pages.end()) << readme << " not found";
  }
  for (const std::string& page : pages) {
    EXPECT_NE(page.rfind("build", 0), 0u) << page;
    EXPECT_NE(page.rfind(".", 0), 0u) << page;
    EXPECT_NE(page.rfind("runs/", 0), 0u) << page;
  }
}

// Every relative link of every page, [text](path) or [text](path#section), leads to a file or
// folder of the repository, and a #section to a heading of that page. Links in code (fenced
// blocks, `spans`) and to other sites are not links of the page.
TEST(Docs, RelativeLinksPointToFilesThatExist) {
  const fs::path root = fs::path(DDP_SOURCE_DIR).lexically_normal();
  const std::regex link(R"(\]\(([^()\s]+)\))"), code_span("`[^`]*`");
  int links = 0;
  for (const std::string& md : markdown_files()) {
    for (const auto& [n, line] : read_page(root / md).prose) {
      const std::string text = std::regex_replace(line, code_span, "");
      for (std::sregex_iterator it(text.begin(), text.end(), link), end; it != end; ++it) {
        const std::string target = (*it)[1];
        if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
        ++links;
        const size_t hash = target.find('#');
        const std::string file = target.substr(0, hash), section = hash == std::string::npos ? "" : target.substr(hash + 1);
        const fs::path to = file.empty() ? root / md : (root / md).parent_path() / file;
        const fs::path normal = to.lexically_normal();
        const std::string where = md + ":" + std::to_string(n) + ": the link to " + target;
        const std::string rel = normal.lexically_relative(root).string();
        if (rel.empty() || rel.rfind("..", 0) == 0) {
          ADD_FAILURE() << where << " leaves the repository";
        } else if (!fs::exists(normal)) {
          ADD_FAILURE() << where << ": " << rel << " does not exist";
        } else if (!section.empty() && (normal.extension() != ".md" || !read_page(normal).anchors.count(section))) {
          ADD_FAILURE() << where << ": " << rel << " has no heading whose anchor is #" << section;
        }
      }
    }
  }
  EXPECT_GT(links, 20) << "the pages link to each other: so few links found means the search is broken";
}

TEST(Docs, AnchorsAreGitHubs) {
  EXPECT_EQ(slug("Chapter 06's tests"), "chapter-06s-tests");
  EXPECT_EQ(slug("What can go wrong, and what you see"), "what-can-go-wrong-and-what-you-see");
  EXPECT_EQ(slug("Seeing it: `--explain-env`"), "seeing-it---explain-env");
  EXPECT_NE(slug("Expected output"), slug("Expected outputs"));
}

// The top README is a learner's page; what maintainers need lives in docs/.
TEST(Docs, TopReadmeIsAPageALearnerReads) {
  std::ifstream in(std::string(DDP_SOURCE_DIR) + "/README.md");
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_GT(lines, 0);
  EXPECT_LE(lines, 250) << "README.md has " << lines << " lines: move maintainers' material into docs/";
}

// ---- Pages that speak to the learner ----

namespace {

// A page a learner reads: the top README, the chapters' pages, the exercises' and common/'s
// READMEs, and every page of docs/ that one of those (not the top README, whose last list is
// the maintainers') links: 01.1 sends the learner to settings.md, 07 to memory.md, 06 to
// slurm.md. The rest of docs/ and bench/ are the maintainers' and the curious reader's.
const std::regex& course_page_re() {
  static const std::regex re(R"(^(\d\d_[^/]+/.*\.md|exercises/README\.md|common/README\.md)$)");
  return re;
}
// The pages of docs/ and bench/ that a chapter's page links: a learner is sent there.
std::set<std::string> pages_a_chapter_links() {
  std::set<std::string> linked;
  static const std::regex link(R"(\]\(([^)#\s]*\.md))");
  for (const std::string& page : markdown_files()) {
    if (!std::regex_match(page, course_page_re())) continue;
    std::ifstream in(fs::path(DDP_SOURCE_DIR) / page);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      const std::string t = (fs::path(page).parent_path() / (*it)[1].str()).lexically_normal().generic_string();
      if (t.rfind("docs/", 0) == 0 || t.rfind("bench/", 0) == 0) linked.insert(t);
    }
  }
  return linked;
}
// Of those, docs/'s: the pages docs/README.md and the top README list as beside the chapters.
std::set<std::string> docs_a_chapter_links() {
  std::set<std::string> docs;
  for (const std::string& p : pages_a_chapter_links()) {
    if (p.rfind("docs/", 0) == 0) docs.insert(p);
  }
  return docs;
}
bool learner_page(const std::string& page) {
  static const std::set<std::string> linked = pages_a_chapter_links();
  return page == "README.md" || std::regex_match(page, course_page_re()) || linked.count(page) > 0;
}

// What a learner page must not say, line by line (outside code blocks and invisible markers):
// the harness's and the maintainers' words; and a going-further page opens with its point, the
// way back to its chapter after it (its first paragraph, not its first words).
std::vector<std::string> learner_page_problems(const std::string& name, const std::string& text) {
  std::vector<std::string> problems;
  std::istringstream in(text);
  const Page page = read_page_text(in);
  const std::regex marker("<!--.*?-->");
  const std::vector<std::pair<std::regex, std::string>> harness = {
      {std::regex(R"(Not run by the tests)"), "a note for the tests: make it an invisible <!-- not run: ... --> marker"},
      {std::regex(R"(\bthe walk of)", std::regex::icase), "the tests' walk of the pages: a maintainer's word"},
      {std::regex(R"(\bissue\s+\d+)", std::regex::icase), "an issue number: a maintainer's word"},
      {std::regex(R"(\b[A-Za-z][\w.-]*(/[\w.-]+)?#\d+\b)"), "an issue number: a maintainer's word"},
  };
  const std::regex heading(R"(^#{1,6}\s.*)"), dated(R"(\b20\d\d-\d\d-\d\d\b)"), in_pytorch(R"(^#{1,6}\s+In PyTorch\b.*)");
  // Where a learner meets no word of the maintainers' at all (headings, "In PyTorch", the
  // exercises' page, going-further pages): not the tests, a test's name, CI or ctest.
  const std::vector<std::pair<std::regex, std::string>> maintainers = {
      {std::regex(R"(\bthe tests?\b)", std::regex::icase), "'the tests': the maintainers' harness"},
      {std::regex(R"(\b[A-Z][A-Za-z0-9]+(/[A-Z][A-Za-z0-9]+)?\.[A-Z][a-z][A-Za-z0-9]+\b)"), "a test's name: the maintainers' catalogue (docs/tests.md)"},
      {std::regex(R"(\bCI\b)"), "CI: a maintainer's word"},
      {std::regex(R"(\bctest\b)"), "ctest: a maintainer's tool"},
      {std::regex(R"('s tests\b)", std::regex::icase), "'the tests': the maintainers' harness"},
      {std::regex(R"(\btests/(?!\w+_reference\.py)[\w.-]+)"), "a test's file: the maintainers' harness (a PyTorch twin, tests/*_reference.py, is the one a learner runs)"},
  };
  // A page a chapter sends the learner to (docs/, bench/) is read as a going-further page is.
  const bool whole_page = name == "exercises/README.md" || name.find("going_further") != std::string::npos ||
                          (name.find('/') != std::string::npos && !std::regex_match(name, course_page_re()));
  bool pytorch_section = false;
  static const std::regex code_span("`[^`]*`");
  for (const auto& [n, raw] : page.prose) {
    const std::string line = std::regex_replace(raw, marker, "");
    const std::string where = name + ":" + std::to_string(n) + ": ";
    for (const auto& [re, why] : harness) {
      if (std::regex_search(line, re)) problems.push_back(where + why);
    }
    const bool is_heading = std::regex_match(line, heading);
    if (is_heading) pytorch_section = std::regex_match(line, in_pytorch);
    if (is_heading && std::regex_search(line, dated)) problems.push_back(where + "a date in a heading");
    if (whole_page || is_heading || pytorch_section) {
      const std::string words = std::regex_replace(line, code_span, "`");
      for (const auto& [re, why] : maintainers) {
        if (std::regex_search(words, re) || (why.rfind("a test's", 0) == 0 && std::regex_search(line, re))) problems.push_back(where + why);
      }
    }
  }
  if (name.find("going_further") != std::string::npos) {
    // The first paragraph after the title.
    std::string first;
    bool titled = false;
    for (const auto& [n, line] : page.prose) {
      if (!titled) {
        titled = line.rfind("# ", 0) == 0;
        continue;
      }
      if (line.empty()) {
        if (first.empty()) continue;
        break;
      }
      first += (first.empty() ? "" : " ") + line;
    }
    if (first.rfind("Back to", 0) == 0) problems.push_back(name + ": opens with the way back; open with the page's point in one sentence");
    if (first.find("](../README.md)") == std::string::npos && first.find("](README.md)") == std::string::npos) {
      problems.push_back(name + ": the first paragraph has no way back to its chapter");
    }
  }
  return problems;
}

}  // namespace

// docs/README.md's first paragraph names the learner's pages of docs/: exactly those a chapter links.
TEST(Docs, DocsReadmeNamesThePagesAChapterSendsALearnerTo) {
  std::ifstream in(fs::path(DDP_SOURCE_DIR) / "docs/README.md");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t title = text.find("\n\n");
  const std::string first = text.substr(title + 2, text.find("\n\n", title + 2) - title - 2);
  std::set<std::string> named;
  static const std::regex link(R"(\]\(([a-z_]+\.md)\))");
  for (auto it = std::sregex_iterator(first.begin(), first.end(), link); it != std::sregex_iterator(); ++it) {
    named.insert("docs/" + (*it)[1].str());
  }
  EXPECT_EQ(named, docs_a_chapter_links()) << "docs/README.md's first paragraph: " << first;
  // And the top README's list of them, "Pages beside the chapters", down to its maintainers' list.
  std::ifstream top(fs::path(DDP_SOURCE_DIR) / "README.md");
  text.assign((std::istreambuf_iterator<char>(top)), std::istreambuf_iterator<char>());
  const size_t from = text.find("## Pages beside the chapters"), to = text.find("For maintainers", from);
  ASSERT_NE(from, std::string::npos);
  const std::string list = text.substr(from, to - from);
  static const std::regex top_link(R"(\]\(docs/([a-z_]+\.md)\))");
  std::set<std::string> listed;
  for (auto it = std::sregex_iterator(list.begin(), list.end(), top_link); it != std::sregex_iterator(); ++it) {
    listed.insert("docs/" + (*it)[1].str());
  }
  EXPECT_EQ(listed, docs_a_chapter_links()) << "README.md's \"Pages beside the chapters\": " << list;
}

TEST(Docs, LearnerPagesSpeakToTheLearner) {
  int pages = 0;
  for (const std::string& page : markdown_files()) {
    if (!learner_page(page)) continue;
    ++pages;
    std::ifstream in(fs::path(DDP_SOURCE_DIR) / page);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const std::string& p : learner_page_problems(page, text)) ADD_FAILURE() << p;
  }
  EXPECT_GE(pages, 20) << "the learner pages were not found";
}

// The same check on planted faults: each is found, and what is right is not.
TEST(Docs, LearnerPageCheckFindsPlantedHarnessWords) {
  const std::string good =
      "# Zero (chapter 05, going further)\n\nZeRO-1 shards the optimizer state. Back to\n[the chapter](../README.md).\n\n"
      "<!-- not run: needs a GPU -->\n```sh\n./x   # Not run by the tests in a comment of code is code\n```\n"
      "The walk itself is cheap: 14 nodes. Its twin `tests/ddp_reference.py` runs it; see [a](#x1).\n";
  EXPECT_TRUE(learner_page_problems("05_ddp/going_further/zero.md", good).empty())
      << ::testing::PrintToString(learner_page_problems("05_ddp/going_further/zero.md", good));
  const std::string bad =
      "# Zero (chapter 05, going further)\n\nBack to [the chapter](../README.md). ZeRO-1 shards it.\n\n"  // 3
      "*Not run by the tests: needs a GPU.*\n"                                                        // 5
      "run.sh is where the walk of these pages starts\n"                                              // 6
      "## Measured (issue 14)\n"                                                                      // 7
      "## One run, 2026-11-24\n"                                                                      // 8
      "The check `Docs.EveryFigureHasItsSource` holds it, as CI does.\n"                              // 9: a name, CI
      "## What the tests prove\n"                                                                     // 10
      "See pytorch#107021 and `tests/test_observe.cpp`; the cuda build's tests run it.\n";            // 11
  const auto found = learner_page_problems("05_ddp/going_further/zero.md", bad);
  const std::string all = ::testing::PrintToString(found);
  auto has = [&](const std::string& s) { return rb::mentions(found, s); };
  EXPECT_TRUE(has("zero.md:5: a note for the tests")) << all;
  EXPECT_TRUE(has("zero.md:6: the tests' walk")) << all;
  EXPECT_TRUE(has("zero.md:7: an issue number")) << all;
  EXPECT_TRUE(has("zero.md:8: a date in a heading")) << all;
  EXPECT_TRUE(has("zero.md: opens with the way back")) << all;
  EXPECT_TRUE(has("zero.md:9: a test's name")) << all;
  EXPECT_TRUE(has("zero.md:9: CI")) << all;
  EXPECT_TRUE(has("zero.md:10: 'the tests'")) << all;
  EXPECT_TRUE(has("zero.md:5: 'the tests'")) << all;
  EXPECT_TRUE(has("zero.md:11: an issue number")) << all;
  EXPECT_TRUE(has("zero.md:11: a test's file")) << all;
  EXPECT_TRUE(has("zero.md:11: 'the tests'")) << all;
  EXPECT_EQ(found.size(), 12u) << all;
  // In a chapter's README: only its headings and its "In PyTorch" section are held to it.
  const std::string chapter =
      "# 05\n\n## In PyTorch\nThe tests hold this to `Trainer/TrainerMatchesPyTorchDDP.FinalParameters`.\n\n"  // 4
      "## Run\nThe tests run it too; TCPStore/FileStore.\n";                                                     // 6-7: allowed here
  const auto in_chapter = learner_page_problems("05_ddp/README.md", chapter);
  EXPECT_EQ(in_chapter.size(), 2u) << ::testing::PrintToString(in_chapter);
  EXPECT_TRUE(rb::mentions(in_chapter, "README.md:4: 'the tests'")) << ::testing::PrintToString(in_chapter);
  EXPECT_TRUE(learner_page("docs/settings.md"));
  EXPECT_TRUE(learner_page("docs/memory.md"));
  EXPECT_TRUE(learner_page("bench/README.md"));  // linked from chapters 03 and 07
  const auto lost = learner_page_problems("05_ddp/going_further/x.md", "# X\n\nA point, and no way back.\n");
  EXPECT_EQ(lost.size(), 1u) << ::testing::PrintToString(lost);
  EXPECT_FALSE(learner_page("docs/walk.md"));
  EXPECT_TRUE(learner_page("05_ddp/going_further/zero.md"));
}

// ---- The memory table against its script (docs/memory.md, bench/memory_table.sh) ----

namespace {

// bench/memory_table.sh's tables, as it prints them or as a page shows them: by caption ("MLP with
// AdamW (k = 2), MiB per rank"), each row's cells (strategy, N, the formula's parameters,
// gradients, optimizer state and sum, the fullest rank's state, the peak) by (strategy, N).
using MemoryTableRows = std::map<std::pair<std::string, int>, std::vector<std::string>>;
std::map<std::string, MemoryTableRows> memory_tables_in(const std::string& text) {
  std::map<std::string, MemoryTableRows> tables;
  static const std::regex caption(R"(^\*\*(MLP with .*, MiB per rank)\*\*$)"), row(R"(^\| (DDP|ZeRO-1|FSDP) \| (\d+) \|.*\|$)");
  std::istringstream in(text);
  std::string current;
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, caption)) {
      current = m[1];
    } else if (!current.empty() && std::regex_match(l, m, row)) {
      std::vector<std::string> cells;
      std::istringstream between(l.substr(1, l.size() - 2));  // inside the outer bars
      for (std::string c; std::getline(between, c, '|');) {
        const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
        cells.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
      }
      tables[current][{m[1].str(), std::stoi(m[2])}] = cells;
    }
  }
  return tables;
}

// The table's header row ("| strategy | N | ..."), "" if there is none.
std::string memory_table_header(const std::string& text) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(R"((^|\n)(\| strategy \| N \|[^\n]*))")) ? m[2].str() : "";
}

// bytes as the script writes them: MiB, 2 decimals (awk's printf is C's).
std::string memory_table_mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f", bytes / 1048576);
  return b;
}

// A cell's MiB, or -1 when it holds no such number.
double memory_table_number(const std::string& cell) {
  return std::regex_match(cell, std::regex(R"(\d+\.\d\d)")) ? std::stod(cell) : -1;
}

// The script's line for the ZeRO paper's mixed-precision form (2Ψ + 2Ψ + KΨ, K = 12), worked out
// here from Ψ for the worlds `ns`.
std::string memory_table_paper_line(int64_t psi, const std::vector<int>& ns) {
  std::string worlds, ddp, os, all;
  for (size_t i = 0; i < ns.size(); ++i) {
    const std::string sep = i ? " / " : "";
    const double n = ns[i], p = static_cast<double>(psi);
    worlds += sep + std::to_string(ns[i]);
    ddp += sep + memory_table_mib(16 * p);
    os += sep + memory_table_mib(4 * p + 12 * p / n);
    all += sep + memory_table_mib(16 * p / n);
  }
  return "The ZeRO paper's own form (Rajbhandari et al., ZeRO, SC 2020, section 5 / Figure 1): mixed precision, "
         "2Ψ + 2Ψ + KΨ bytes with K = 12 (Adam), for Ψ = " + std::to_string(psi) + ", MiB per rank at N = " + worlds +
         ": DDP " + ddp + "; ZeRO-1 (P_os in the paper: optimizer state partitioned, 2Ψ + 2Ψ + KΨ/N) " + os + "; FSDP (P_os+g+p: optimizer state, gradients and parameters partitioned, (2 + 2 + K)Ψ/N) " + all + ".";
}

}  // namespace

// docs/memory.md shows what bench/memory_table.sh printed (Note [Why the peak exceeds the formula]
// in that script). Held exactly: every formula cell of the page's 24 rows is the closed form for
// the MLP's Ψ, and so is its line for the ZeRO paper's form; a run of the script's quick form
// (worlds 1 and 2, about 15 s) prints the same header, the same formula cells and the same
// optimizer state on the fullest rank (ZeRO-1's whole-tensor partition, FSDP's padded shards)
// as the page, to the digit. Held loosely, the peaks: a peak is what is alive at a rank's worst
// moment, which depends on when the run's threads (Gloo's, the data's) let go of what they hold,
// and the same build on the same machine moved one by up to 1.02 MiB between runs (the page's
// "Measured"); another CPU's kernels allocate through LibTorch's allocator too, so they may move
// it further. So each peak, on the page and in the run, must be there and above its row's sum
// (what the page teaches: the peak exceeds the model state), and the run's within 2 MiB of the
// page's. 05's --memory-limit-mb 100000 in the script only has the peak printed; no peak is
// near it. The cpu build runs this (Docs.*): its LibTorch recorded the page.
TEST(Docs, TheMemoryPageIsWhatItsScriptPrints) {
  const std::string page = read_source_file("docs/memory.md");
  ASSERT_FALSE(page.empty()) << "docs/memory.md";
  const int64_t psi = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10;  // the MLP's parameters
  const std::vector<std::pair<std::string, int>> optimizers{{"MLP with AdamW (k = 2), MiB per rank", 2},
                                                            {"MLP with SGD with momentum 0.9 (k = 1), MiB per rank", 1}};
  // The formula's cells of one row: parameters, gradients, optimizer state, their sum (bytes).
  auto formula = [&](const std::string& strategy, int n, int k) {
    double p = 4.0 * static_cast<double>(psi), g = 4.0 * static_cast<double>(psi), s = 4.0 * k * static_cast<double>(psi);
    if (strategy == "ZeRO-1") s /= n;
    if (strategy == "FSDP") p /= n, g /= n, s /= n;
    return std::vector<double>{p, g, s, p + g + s};
  };
  const auto on_page = memory_tables_in(page);
  const nlohmann::json memory_result = nlohmann::json::parse(read_source_file("results/memory_table.json"), nullptr, false);
  ASSERT_TRUE(memory_result.is_object() && memory_result.contains("rows")) << "results/memory_table.json (bench/memory_table.sh writes it)";
  EXPECT_EQ(on_page.size(), optimizers.size()) << "docs/memory.md: one table per optimizer";
  for (const auto& [caption, k] : optimizers) {
    ASSERT_TRUE(on_page.count(caption)) << "docs/memory.md: no table '" << caption << "'";
    const MemoryTableRows& rows = on_page.at(caption);
    EXPECT_EQ(rows.size(), 12u) << caption;
    for (const std::string strategy : {"DDP", "ZeRO-1", "FSDP"}) {
      for (int n = 1; n <= 4; ++n) {
        const std::string where = "docs/memory.md, " + caption + ", " + strategy + " at N = " + std::to_string(n);
        const auto it = rows.find({strategy, n});
        if (it == rows.end()) {
          ADD_FAILURE() << where << ": no such row";
          continue;
        }
        const std::vector<std::string>& c = it->second;
        ASSERT_EQ(c.size(), 8u) << where;
        const std::vector<double> f = formula(strategy, n, k);
        for (int i = 0; i < 4; ++i) EXPECT_EQ(c[2 + i], memory_table_mib(f[i])) << where << ", column " << 3 + i;
        if (strategy == "DDP") {
          EXPECT_EQ(c[6], "—") << where << ": 05 prints no state without --zero";
        } else {
          EXPECT_GE(memory_table_number(c[6]), memory_table_number(memory_table_mib(f[2]))) << where << ": the fullest rank holds at least 1/N";
        }
        EXPECT_GT(memory_table_number(c[7]), f[3] / 1048576) << where << ": a peak, above the model state";
        // The table is its result file's run, cell by cell (Note [Every figure has its source]).
        const std::string optimizer = k == 2 ? "adamw" : "sgd";
        bool found = false;
        for (const auto& row : memory_result["rows"]) {
          if (row["optimizer"] != optimizer || row["strategy"] != strategy || row["N"] != n) continue;
          found = true;
          const char* keys[] = {"parameters_MiB", "gradients_MiB", "optimizer_state_MiB", "sum_MiB", "fullest_state_MiB", "peak_MiB"};
          for (int i = 0; i < 6; ++i) {
            const std::string cell = row[keys[i]].is_null() ? "—" : memory_table_mib(row[keys[i]].get<double>() * 1048576);
            EXPECT_EQ(c[2 + i], cell) << where << ": results/memory_table.json's " << keys[i];
          }
        }
        EXPECT_TRUE(found) << where << ": not in results/memory_table.json";
      }
    }
  }
  const std::string paper = memory_table_paper_line(psi, {1, 2, 3, 4});
  EXPECT_NE(page.find("\n" + paper + "\n"), std::string::npos) << "docs/memory.md lacks the line\n" << paper;

  const std::string dir = temp_dir();
  const ProcResult r = run_one({{DDP_SOURCE_DIR "/bench/memory_table.sh", "--quick", DDP_BIN_DIR}, {{"TMPDIR", dir}}}, 110);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(memory_table_header(r.output), memory_table_header(page)) << r.output;
  EXPECT_FALSE(memory_table_header(page).empty());
  EXPECT_NE(r.output.find(memory_table_paper_line(psi, {1, 2})), std::string::npos) << r.output;
  const auto printed = memory_tables_in(r.output);
  EXPECT_EQ(printed.size(), optimizers.size()) << r.output;
  for (const auto& [caption, k] : optimizers) {
    ASSERT_TRUE(printed.count(caption) && on_page.count(caption)) << caption << "\n" << r.output;
    EXPECT_EQ(printed.at(caption).size(), 6u) << r.output;
    for (const auto& [key, c] : printed.at(caption)) {
      const std::string where = caption + ", " + key.first + " at N = " + std::to_string(key.second);
      const auto it = on_page.at(caption).find(key);
      ASSERT_NE(it, on_page.at(caption).end()) << "docs/memory.md has no row for the run's " << where;
      const std::vector<std::string>& w = it->second;
      ASSERT_EQ(c.size(), w.size()) << where;
      for (size_t i = 0; i + 1 < c.size(); ++i) EXPECT_EQ(c[i], w[i]) << where << ", column " << i + 1 << ": printed against the page's";
      const double peak = memory_table_number(c.back()), recorded = memory_table_number(w.back());
      EXPECT_GT(peak, formula(key.first, key.second, k)[3] / 1048576) << where << ": the run's peak, above the model state";
      EXPECT_NEAR(peak, recorded, 2.0) << where << ": the run's peak against the page's";
    }
  }
}

// ---- Help that tells the truth (Note [Help that tells the truth] in common/basics/cli.cpp) ----

namespace {

// A help text cut into its options: (name, its lines up to the next option), in order.
std::vector<std::pair<std::string, std::string>> options_of(const std::string& help) {
  std::vector<std::pair<std::string, std::string>> options;
  std::istringstream in(help);
  const std::regex starts(R"(^\s+(-\w,)?(--[\w-]+))");
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, starts)) options.emplace_back(m[2], "");
    if (!options.empty()) options.back().second += l + "\n";
  }
  return options;
}

// The help text of one option of `program --help`: its lines, up to the next option.
std::string help_of(const std::string& help, const std::string& option) {
  for (const auto& [name, block] : options_of(help)) {
    if (name == option) return block;
  }
  return "";
}

// The default an option's help states, or "" when it states none.
std::string stated_default(const std::string& help, const std::string& option) {
  std::smatch m;
  const std::string text = help_of(help, option);
  // "[default 3]" gives "3"; a rule, "[default: 1]", gives ": 1".
  return std::regex_search(text, m, std::regex(R"(\[default( |(: ))([^\]]*)\])")) ? m[2].str() + m[3].str() : "";
}

std::string help_text(const std::string& program) {
  const ProcResult r = run_one({{program, "--help"}}, 30);
  EXPECT_EQ(r.exit_code, 0) << program << " --help\n" << r.output;
  return r.output;
}

// --explain-env's value of one setting, e.g. "gloo   <- default: no GPU (env DDP_GPU_COUNT)".
std::string explained(const std::map<std::string, std::string>& env, const std::string& key) {
  const ProcResult r = run_one({{"01_join_group", "--explain-env"}, env}, 30);
  std::smatch m;
  if (!std::regex_search(r.output, m, std::regex("\\n\\s+" + key + "\\s+= ([^\\n]*)"))) return "(no " + key + " in: " + r.output + ")";
  return m[1];
}

}  // namespace

// A value default is never typed into a description: the formatter shows the variable's own.
// What is typed is a rule, "[default: ...]", checked against behaviour below.
TEST(Help, NoValueDefaultIsWrittenByHand) {
  const std::regex by_hand(R"(\[default [^:\]"][^\]"]*\])");
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(DDP_SOURCE_DIR)) {
    const std::string path = e.path().string(), rel = path.substr(std::string(DDP_SOURCE_DIR).size() + 1);
    if (e.path().extension() != ".cpp" || rel.rfind("build", 0) == 0 || rel.rfind("tests/", 0) == 0 || rel.rfind(".", 0) == 0) continue;
    ++files;
    std::ifstream in(path);
    int n = 0;
    for (std::string l; std::getline(in, l);) {
      ++n;
      if (l.find("//") != std::string::npos && l.find("//") < l.find('"')) continue;  // a comment
      if (std::regex_search(l, by_hand)) {
        ADD_FAILURE() << rel << ":" << n << ": a default written by hand; let --help show the variable's (or state a rule as [default: ...]):\n" << l;
      }
    }
  }
  EXPECT_GT(files, 20);
}

// The trainer's defaults as --help states them, against what a run without those flags does:
// the model, the epochs, the data folder, determinism, and the device that the backend implies.
TEST(Help, TrainerDefaultsAreWhatARunUses) {
  const std::string help = help_text("05_ddp");
  EXPECT_EQ(stated_default(help, "--model"), "mlp") << help;
  EXPECT_EQ(stated_default(help, "--epochs"), "3") << help;
  EXPECT_EQ(stated_default(help, "--deterministic"), "on") << help;
  // A rule (Note [A run folder per run] in 05_ddp/trainer/options.h), checked against the run below.
  EXPECT_EQ(stated_default(help, "--out"),
            ": runs/05_ddp/<model>-<optimizer>-<data>, <data> fashion-mnist or synthetic, then -N with --train-samples N")
      << help;
  EXPECT_NE(stated_default(help, "--data-dir").find("/usr/share/datasets/fashion-mnist"), std::string::npos) << help;
  EXPECT_NE(help_of(help, "--backend").find("gloo (tensors on the CPU) or nccl (each rank on GPU cuda:<local rank>)"), std::string::npos)
      << help;
  const std::string dir = temp_dir();
  const ProcResult r = run_one({{"/bin/bash", "-c",
                                 "cd " + dir + " && " + bin("05_ddp") + " --master-port " + std::to_string(free_port()) +
                                     " --train-samples 256 --test-samples 64 --max-steps 1"}},
                               120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model " + stated_default(help, "--model") + ": "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 1/" + stated_default(help, "--epochs") + " "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("images from /usr/share/datasets/fashion-mnist/"), std::string::npos) << r.output;
  // No --backend on a host without a GPU (DDP_GPU_COUNT=0): Gloo, so the tensors live on the CPU.
  EXPECT_NE(r.output.find("compute: cpu, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", deterministic\n"), std::string::npos) << "--deterministic is on by default\n" << r.output;
  // The rule's folder: the default model and optimizer, on Fashion-MNIST, 256 training images.
  const std::string folder = "runs/05_ddp/" + stated_default(help, "--model") + "-" + stated_default(help, "--optimizer") + "-fashion-mnist-256";
  EXPECT_TRUE(fs::exists(dir + "/" + folder + "/checkpoints/ckpt-000000001.pt")) << r.output;
  fs::remove_all(dir);
}

// The common flags' rules, against --explain-env: the backend follows the GPUs per local rank;
// the store's address and port, the rendezvous and the timeout fall back as stated.
TEST(Help, CommonDefaultsAreTheRulesRankResolutionFollows) {
  const std::string help = help_text("01_join_group");
  EXPECT_EQ(stated_default(help, "--backend"),
            ": nccl when this host has a GPU for every local rank, else gloo; DDP_GPU_COUNT overrides the count");
  EXPECT_EQ(explained({{"DDP_GPU_COUNT", "0"}, {"WORLD_SIZE", "2"}}, "backend").substr(0, 4), "gloo");
  EXPECT_EQ(explained({{"DDP_GPU_COUNT", "1"}, {"WORLD_SIZE", "2"}}, "backend").substr(0, 4), "gloo");
  EXPECT_EQ(explained({{"DDP_GPU_COUNT", "2"}, {"WORLD_SIZE", "2"}}, "backend").substr(0, 4), "nccl");
  EXPECT_EQ(stated_default(help, "--master-port"), ": env MASTER_PORT, else 15000 + Slurm job id % 10000, else 29500");
  EXPECT_EQ(explained({}, "master_port"), "29500   <- default");
  EXPECT_EQ(explained({{"MASTER_PORT", "1234"}}, "master_port"), "1234   <- env MASTER_PORT");
  EXPECT_EQ(explained({{"SLURM_JOB_ID", "123456"}}, "master_port").substr(0, 5), "18456");
  EXPECT_EQ(stated_default(help, "--master-addr"),
            ": env MASTER_ADDR, else the first host of Slurm's node list, else 127.0.0.1");
  EXPECT_EQ(explained({}, "master_addr"), "127.0.0.1   <- default");
  EXPECT_EQ(explained({{"SLURM_JOB_NODELIST", "gpu[08-11]"}}, "master_addr").substr(0, 6), "gpu08 ");
  EXPECT_EQ(stated_default(help, "--init"), ": env://");
  EXPECT_EQ(explained({}, "init"), "env://   <- default");
  EXPECT_EQ(stated_default(help, "--timeout"), ": 60");
  EXPECT_EQ(explained({}, "timeout_s"), "60   <- default");
  EXPECT_EQ(stated_default(help, "--world-size"), ": env WORLD_SIZE, else SLURM_NTASKS, else 1");
  EXPECT_EQ(explained({}, "world_size"), "1   <- default");
}

// 02's and 06's rule-stated defaults: nodes and workers per node; tasks per node with and without GPUs.
TEST(Help, LauncherAndSubmitterDefaultsAreWhatTheyDo) {
  const std::string spawn = help_text("02_spawn");
  EXPECT_EQ(stated_default(spawn, "--nnodes"), ": 1");
  EXPECT_EQ(stated_default(spawn, "--nproc-per-node"), ": world-size / nnodes, else 2");
  EXPECT_NE(run_one({{"02_spawn", "--timeout", "20"}}, 60).output.find("(1 node(s) x 2 per node)"), std::string::npos);
  EXPECT_NE(run_one({{"02_spawn", "--world-size", "4", "--nnodes", "2", "--timeout", "20"}}, 60).output.find("(2 node(s) x 2 per node)"),
            std::string::npos);
  const std::string slurm = help_text("06_slurm");
  EXPECT_EQ(stated_default(slurm, "--tasks-per-node"), ": 2; with GPUs: --gpus-per-node");
  EXPECT_EQ(stated_default(slurm, "--nodes"), "1");
  EXPECT_NE(run_one({{"06_slurm"}}, 30).output.find("#SBATCH --ntasks-per-node=2"), std::string::npos);
  EXPECT_NE(run_one({{"06_slurm", "--gpus-per-node", "4"}}, 30).output.find("#SBATCH --ntasks-per-node=4"), std::string::npos);
  EXPECT_NE(run_one({{"06_slurm"}}, 30).output.find("#SBATCH --nodes=1"), std::string::npos);
}

// One default per option: a typed rule beside a captured value would be two sources that can disagree.
TEST(Help, EachOptionStatesOneDefault) {
  for (const char* program : {"01_join_group", "02_spawn", "03_manual_allreduce", "04_grad_hooks", "05_ddp", "06_slurm", "allreduce_bench",
                              "cost_model", "trace_merge"}) {
    for (const auto& [name, block] : options_of(help_text(program))) {
      if (count(block, "[default") > 1) ADD_FAILURE() << program << " " << name << " states two defaults:\n" << block;
    }
  }
}
