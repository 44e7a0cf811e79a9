// The READMEs walked as a learner walks them: after scripts/run.sh, every command the pages
// invite a learner to run, verbatim, in reading order, in one scratch copy of the repository,
// each checked to exit as its text says (Note [Walking the READMEs]; for writers: docs/walk.md).
//
// Note [Walking the READMEs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Runs that share defaults (the trainer's --out runs/05_ddp, the port 29500) meet as they do for a
// learner only when every command runs in one place, in the order the pages are read; a test per
// example in a folder of its own (Note [Checked examples]) cannot see it. So:
//
// The copy: the repository's files as a clone would have them (`git ls-files`: tracked, plus new
// files git does not ignore, as they are in the working tree), with `build-cpu` linking to this
// build. No `.venv` and no `build-cuda`: scripts/run.sh makes neither (the cuda flavour's setup
// does), so a command that needs them needs a `not run` marker. In it, first the chapters scripts/run.sh
// runs (it sources scripts/course.sh's; `scripts/course.sh build-cpu` runs the same ones: runs/05_ddp
// and runs/06_slurm as a learner has them), then the blocks.
//
// Reading order: README.md; then each chapter's README (NN_name/README.md, by name), each followed
// by the pages it links (relative links to .md files of the repository, in the order of their
// first link, each page once; a chapter README is walked only in its own turn): its own folder's
// pages with what they link in turn (depth first), other pages (docs/) alone; then the pages
// README.md links that no chapter reached, depth first, and last what the other pages read with
// a chapter link. A page of the repository with a runnable block that this order does not reach
// fails the test: link it, or fence it otherwise.
//
// Blocks: every fence of a walked page has an info string, so that nothing is left to a guess:
//   ```sh, ```bash, ```shell   every line is a command (blank and `#` lines skipped);
//   ```console                 the `$ ` lines are commands, the rest is what they print;
//   anything else (```text, ```cpp, ```json, ...) is not run.
// A trailing `\` continues a command on the next line (a command bash cannot parse alone, such
// as a `for` loop spread over lines without it, or `<job id>`, fails); a command ending in `&`
// runs in the background and the block waits for it at its end. Refused: a fence without an
// info string, a `$ ` prompt in ```sh (that is ```console), a ```console block with no `$ ` line
// (that is ```text), a `<!-- checked -->` block that is not ```console, and `sudo` (the course
// runs as root, where Debian has no sudo: say "as root" and mark the block `root`). A shell
// script's contents (a batch script) are ```text: ```bash would run them.
//
// Exit codes: 0, unless the command's line ends in a comment `# exit N` (visible: "# exit 75:
// checkpointed; the same command resumes"), or, for the last command of a checked block, its
// marker's exit=N. A command that runs past its timeout is killed, with everything it started.
// A checked block (Note [Checked examples] in test_docs.cpp) is compared with its page too: what
// its commands printed, one command after the other, here, after the blocks before it (a learner
// who ran those sees the same); so it is never left to the long tier or to a `not run` marker.
//
// One block is one terminal: each runs in one bash from the copy's root, so a variable or an
// `eval` lasts to the end of the block, not beyond; its stdin is /dev/null. The environment is the
// tests' (no rank variables, DDP_GPU_COUNT=0) with a learner's PATH: no virtualenv or build folder
// on it (a bare `tensorboard` or `trace_merge` fails as it does for them). Two changes, because
// build-cpu is this build and must not be reconfigured from the copy: DDP_BUILD_DIR names it (the
// bench scripts then use it as built), and a `cmake` on PATH refuses to run.
//
// An invisible marker on the line before the fence (or before its `<!-- checked -->` line):
//   <!-- walk: timeout=300 long root slurm -->
//   timeout=S  seconds per command (default 120);
//   long       only in the long tier (DDP_LONG_TESTS=1): benchmarks, long trainings;
//   root       only as root (network namespaces), else listed as skipped with the reason;
//   slurm      long, and only with a running Slurm (SLURM_CONF; scripts/test.sh starts one).
// A checked block's own root, slurm and timeout= count too. A marker (this one, or `not run`
// below) that no fence follows is refused.
// A block a learner is invited to run but the tests cannot (a GPU, a real cluster, a server that
// waits for a browser) carries a marker of its own, invisible as the others (the page says in a
// learner's words what the block needs; the reason is for whoever reads the walk's list):
//   <!-- not run: needs a GPU -->
// and is listed with its reason. Every other runnable block runs: one that cannot run here fails
// the walk, so nothing is left unchecked without saying so.
// DDP_WALK_SOURCE=<checkout> walks another checkout (a fresh clone, a branch) with this build;
// DDP_WALK_KEEP=1 keeps the copy afterwards.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/launch/command.h"
#include "common/launch/error_file.h"
#include "common/launch/rank_env.h"
#include "checked_blocks.h"
#include "proc.h"
#include "readme_blocks.h"

extern char** environ;

using namespace ddp_test;
namespace fs = std::filesystem;
namespace rb = ddp_test::readme;

namespace {

// The chapters scripts/run.sh runs (it sources course.sh's); the walk starts where it leaves a learner.
const std::string kAfterRunSh = "scripts/course.sh build-cpu";
const double kDefaultTimeout = 120;

// The checkout to walk: this repository, or DDP_WALK_SOURCE (another checkout, e.g. a fresh
// clone, walked with this build).
std::string walk_source() {
  const char* other = std::getenv("DDP_WALK_SOURCE");
  return other && *other ? other : DDP_SOURCE_DIR;
}

// One block to walk.
struct Step {
  std::string page;
  int line = 0;  // of its opening fence
  std::vector<rb::Command> commands;
  double timeout_s = kDefaultTimeout;
  bool long_tier = false, root = false, slurm = false;
  bool checked = false;  // a `<!-- checked -->` block: what it prints is compared with the page too
  std::string not_run;   // the reason its `not run` marker gives
};

bool is_shell(const std::string& info) { return info == "sh" || info == "bash" || info == "shell"; }

// The blocks of one page to walk, in order; what is malformed goes to `problems`.
std::vector<Step> steps_of(const std::string& page, const std::string& text, std::vector<std::string>& problems) {
  std::vector<Step> steps;
  // A walk or `not run` marker that no fence follows would be silently ignored: refused.
  const std::vector<std::string> lines = rb::lines_of(text);
  std::vector<bool> fenced_or_attached(lines.size() + 1, false);
  for (const rb::Fence& f : rb::fences(text)) {
    for (size_t k = f.line - f.markers.size(); k <= std::min(lines.size(), f.line + f.body.size() + 1); ++k) fenced_or_attached[k] = true;
    if (f.label_line) fenced_or_attached[f.label_line] = true;
  }
  for (size_t k = 1; k <= lines.size(); ++k) {
    if (fenced_or_attached[k]) continue;
    if (lines[k - 1].rfind("<!-- walk", 0) == 0 || std::regex_match(lines[k - 1], rb::label_pattern())) {
      problems.push_back(page + ":" + std::to_string(k) + ": a walk or 'not run' marker that no fence follows " +
                         "(markers go on the lines right before the fence)");
    }
  }
  for (const rb::Fence& f : rb::fences(text)) {
    const std::string where = page + ":" + std::to_string(f.line) + ": ";
    const auto checked = rb::marker_options(f, "checked");
    const auto walk = rb::marker_options(f, "walk");
    if (f.info.empty()) {
      problems.push_back(where + "a fence without an info string: say what it holds (```sh: commands; ```console: `$ ` commands and "
                                 "what they print; ```text, ```cpp, ...: not run)");
      continue;
    }
    const bool console = f.info == "console";
    if (checked && !console) problems.push_back(where + "a checked block shows commands and their output: fence it ```console");
    if (!console && !is_shell(f.info)) {
      if (walk) problems.push_back(where + "a walk marker on a ```" + f.info + " block, which is not run");
      if (!f.label.empty()) problems.push_back(where + "a 'not run' marker on a ```" + f.info + " block, which is not run anyway");
      continue;
    }
    Step s{page, f.line, rb::commands(f.body, f.line + 1, console)};
    s.not_run = f.label;
    s.checked = checked.has_value();
    if (console && s.commands.empty()) problems.push_back(where + "a ```console block without a `$ ` command: fence it ```text");
    if (!console && s.commands.empty()) problems.push_back(where + "an empty ```" + f.info + " block");
    for (size_t i = 0; i < f.body.size() && !console; ++i) {
      if (f.body[i].rfind("$ ", 0) == 0) {
        problems.push_back(page + ":" + std::to_string(f.line + 1 + i) + ": a `$ ` prompt in a ```" + f.info +
                           " block, whose lines are the commands themselves: fence it ```console, or drop the prompt");
      }
    }
    for (const rb::Command& c : s.commands) {
      if (c.text.rfind("sudo ", 0) == 0) {
        problems.push_back(page + ":" + std::to_string(c.line) +
                           ": `sudo`: the course runs as root, where Debian has no sudo; say 'as root' and mark the block <!-- walk: root -->");
      }
    }
    if (!f.label.empty() && walk) problems.push_back(where + "both a walk marker and a 'not run' marker");
    for (const std::string& o : walk.value_or(std::vector<std::string>{})) {
      if (o == "long") s.long_tier = true;
      else if (o == "root") s.root = true;
      else if (o == "slurm") s.slurm = s.long_tier = true;
      else if (std::regex_match(o, std::regex(R"(timeout=\d+(\.\d+)?)"))) s.timeout_s = std::stod(o.substr(8));
      else problems.push_back(where + "unknown walk option '" + o + "' (timeout=S, long, root, slurm)");
    }
    for (const std::string& o : checked.value_or(std::vector<std::string>{})) {
      if (o == "root") s.root = true;
      else if (o == "slurm") s.slurm = s.long_tier = true;
      else if (std::regex_match(o, std::regex(R"(timeout=\d+(\.\d+)?)")) && !walk) s.timeout_s = std::stod(o.substr(8));
      else if (std::regex_match(o, std::regex(R"(exit=\d+)")) && !s.commands.empty() && !s.commands.back().exit) s.commands.back().exit = std::stoi(o.substr(5));
    }
    if (s.checked && !s.slurm && (s.long_tier || !s.not_run.empty())) {
      problems.push_back(where + "a checked block runs and is compared in every walk: no `long` or 'not run' marker on it");
    }
    steps.push_back(s);
  }
  return steps;
}

bool has_runnable_block(const std::string& text) {
  for (const rb::Fence& f : rb::fences(text)) {
    if (is_shell(f.info) || f.info == "console" || rb::marker_options(f, "checked")) return true;
  }
  return false;
}

// Note [Walking the READMEs]: README.md, the chapters each with what they link, then what
// README.md links that no chapter reached.
std::vector<std::string> reading_order(const std::vector<std::string>& pages, const std::function<std::string(const std::string&)>& read) {
  const std::set<std::string> exists(pages.begin(), pages.end());
  std::vector<std::string> chapters;
  const std::regex chapter(R"(^\d\d_[^/]+/README\.md$)");
  for (const std::string& p : pages) {
    if (std::regex_match(p, chapter)) chapters.push_back(p);
  }
  std::sort(chapters.begin(), chapters.end());
  std::vector<std::string> order, later;  // later: pages read from a chapter whose own links wait for the end
  std::set<std::string> seen;
  std::function<void(const std::string&, const std::string&)> follow_links;
  // Within `folder` ("" for everywhere) a page's links are followed at once; outside it, at the end.
  auto visit = [&](const std::string& page, const std::string& folder) {
    if (!exists.count(page) || seen.count(page)) return;
    seen.insert(page);
    order.push_back(page);
    if (page.rfind(folder, 0) == 0) follow_links(page, folder);
    else later.push_back(page);
  };
  follow_links = [&](const std::string& page, const std::string& folder) {
    for (const std::string& l : rb::linked_pages(page, read(page))) {
      if (l != "README.md" && !std::regex_match(l, chapter)) visit(l, folder);
    }
  };
  if (exists.count("README.md")) {
    seen.insert("README.md");
    order.push_back("README.md");
  }
  for (const std::string& c : chapters) visit(c, c.substr(0, c.find('/') + 1));
  if (exists.count("README.md")) follow_links("README.md", "");
  for (size_t i = 0; i < later.size(); ++i) follow_links(later[i], "");
  return order;
}

// ---- Running a block ----

struct Ran {
  bool started = false, finished = false, timed_out = false;
  int code = -1;  // its exit status (bash's: 128 + N for a signal)
  double seconds = 0;
  std::string output;
};

// The walk's environment: the tests' (no rank variables, DDP_GPU_COUNT=0) with a learner's PATH,
// plus the two changes that keep this build from being rebuilt (Note [Walking the READMEs]).
std::vector<std::string> walk_env(const std::string& copy, const std::string& shim, bool slurm) {
  std::vector<std::string> env;
  std::string path;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e, name = kv.substr(0, kv.find('='));
    if (ddp::steers_rank_resolution(name) || name == "DDP_GPU_COUNT" || name == "VIRTUAL_ENV" || name == "DDP_BUILD_DIR") continue;
    if (name == "PATH") {
      std::istringstream in(kv.substr(5));
      for (std::string dir; std::getline(in, dir, ':');) {
        const bool ours = dir.rfind(DDP_SOURCE_DIR, 0) == 0 || dir.rfind(DDP_BIN_DIR, 0) == 0 || dir.rfind(walk_source(), 0) == 0;
        if (dir.empty() || ours || fs::exists(dir + "/activate")) continue;  // a virtualenv's bin
        path += ":" + dir;
      }
      continue;
    }
    env.push_back(kv);
  }
  env.push_back("PATH=" + shim + path);
  env.push_back("DDP_GPU_COUNT=0");
  env.push_back("DDP_BUILD_DIR=" + copy + "/build-cpu");
  if (const char* conf = std::getenv("SLURM_CONF"); slurm && conf) env.push_back(std::string("SLURM_CONF=") + conf);
  return env;
}

// The folder put first on the walk's PATH: a `cmake` that refuses (Note [Walking the READMEs]).
std::string shim_folder(const std::string& copy) {
  const std::string shim = copy + "/.walk-bin";
  fs::create_directories(shim);
  std::ofstream(shim + "/cmake") << "#!/bin/sh\necho \"the README walk builds nothing: its build-cpu is the tests' own build "
                                    "(the bench scripts take DDP_BUILD_DIR)\" >&2\nexit 1\n";
  fs::permissions(shim + "/cmake", fs::perms::owner_all);
  return shim;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Runs a block's commands in one bash from `copy`, each with its own deadline (Note [Walking the
// READMEs]); returns what each did.
std::vector<Ran> run_block(const std::string& copy, const std::vector<rb::Command>& cmds, double timeout_s,
                           const std::vector<std::string>& env) {
  const std::string work = temp_dir();
  std::string script = "exec 9>>" + quoted(work + "/status") + "\n";
  for (size_t i = 0; i < cmds.size(); ++i) {
    const std::string n = std::to_string(i);
    script += "echo 'start " + n + "' >&9\n{ " + cmds[i].text + "\n} > " + quoted(work + "/" + n + ".out") + " 2>&1 < /dev/null";
    script += cmds[i].background ? " &\n__walk_bg_" + n + "=$!\n" : "\necho \"end " + n + " $?\" >&9\n";
  }
  for (size_t i = 0; i < cmds.size(); ++i) {
    const std::string n = std::to_string(i);
    if (cmds[i].background) script += "wait $__walk_bg_" + n + "; echo \"end " + n + " $?\" >&9\n";
  }
  std::ofstream(work + "/block.sh") << script;
  std::vector<std::string> env_copy = env;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own process group: a command past its deadline dies with all it started
    if (::chdir(copy.c_str()) != 0) ::_exit(99);
    const int in = ::open("/dev/null", O_RDONLY), out = ::open((work + "/bash.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    std::vector<char*> envp;
    for (auto& kv : env_copy) envp.push_back(kv.data());
    envp.push_back(nullptr);
    const std::string script_path = work + "/block.sh";
    char* argv[] = {const_cast<char*>("bash"), const_cast<char*>(script_path.c_str()), nullptr};
    ::execve("/bin/bash", argv, envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  std::vector<Ran> ran(cmds.size());
  std::vector<double> began(cmds.size(), 0);
  auto read_status = [&] {  // "start <i>" and "end <i> <exit status>" lines; a line not yet whole waits
    const std::string text = read_text(work + "/status");
    std::istringstream lines(text.substr(0, text.rfind('\n') + 1));
    for (std::string l; std::getline(lines, l);) {
      std::istringstream in(l);
      std::string what;
      size_t i = 0;
      int code = -1;
      if (!(in >> what >> i) || i >= ran.size()) continue;
      if (what == "start" && !ran[i].started) {
        ran[i].started = true;
        began[i] = ddp::monotonic_seconds();
      } else if (what == "end" && !ran[i].finished && (in >> code)) {
        ran[i].code = code;
        ran[i].seconds = ddp::monotonic_seconds() - began[i];
        ran[i].finished = true;
      }
    }
  };
  int status = 0;
  for (;;) {
    read_status();
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    bool late = false;
    for (size_t i = 0; i < ran.size(); ++i) {
      if (ran[i].started && !ran[i].finished && ddp::monotonic_seconds() - began[i] > timeout_s) late = ran[i].timed_out = true;
    }
    if (late) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);  // what a command left running in the background
  read_status();
  const int bash_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string bash_out = read_text(work + "/bash.out");
  for (size_t i = 0; i < ran.size(); ++i) {
    ran[i].output = read_text(work + "/" + std::to_string(i) + ".out");
    if (ran[i].started && !ran[i].finished) {
      ran[i].seconds = ddp::monotonic_seconds() - began[i];
      if (!ran[i].timed_out) ran[i].code = bash_code;  // the shell itself stopped in it (a syntax error, an `exit`)
    }
    if (!ran[i].finished && !bash_out.empty()) ran[i].output += "(bash:)\n" + bash_out;
  }
  fs::remove_all(work);
  return ran;
}

std::string last_lines(const std::string& text, int n) {
  std::vector<std::string> lines = rb::lines_of(text);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size(); ++i) out += "    | " + lines[i] + "\n";
  return out;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

struct WalkOptions {
  bool long_tier = false;     // DDP_LONG_TESTS=1
  bool root = false;          // geteuid() == 0
  std::string slurm_missing;  // why the Slurm blocks cannot run ("" when they can)
};

struct Walked {
  std::vector<std::string> problems;  // README:line, the command, exit code vs expected, its last lines
  int ran = 0, skipped = 0, not_run = 0;
  int compared = 0, uncompared = 0;  // checked blocks whose output was compared with their page, or not (another build)
};

// Walks the pages' blocks in order in `copy`, printing a line per command as it goes.
Walked walk(const std::string& copy, const std::vector<std::string>& pages, const WalkOptions& opt) {
  Walked w;
  const std::string shim = shim_folder(copy);
  for (const std::string& page : pages) {
    for (const Step& s : steps_of(page, read_text(copy + "/" + page), w.problems)) {
      const std::string where = page + ":" + std::to_string(s.line);
      std::string skip;
      if (!s.not_run.empty()) skip = "not run by the tests: " + s.not_run;
      else if (s.long_tier && !opt.long_tier) skip = "long tier (DDP_LONG_TESTS=1 runs it)";
      else if (s.root && !opt.root) skip = "needs root (network namespaces)";
      else if (s.slurm && !opt.slurm_missing.empty()) skip = opt.slurm_missing;
      if (!skip.empty()) {
        std::cout << "[walk] " << where << ": skipped, " << skip << "\n" << std::flush;
        (s.not_run.empty() ? w.skipped : w.not_run) += static_cast<int>(s.commands.size());
        continue;
      }
      // A command bash cannot parse would stop the whole block: reported, and left out.
      std::vector<rb::Command> runnable;
      for (const rb::Command& c : s.commands) {
        const ddp::CommandResult parsed = ddp::run_command({"bash", "-n", "-c", c.text}, 30);
        if (parsed.exit_code == 0) {
          runnable.push_back(c);
          continue;
        }
        std::cout << "[walk] " << page << ":" << c.line << ": FAILED, not a whole shell command  $ " << one_line(c.text) << "\n";
        w.problems.push_back(page + ":" + std::to_string(c.line) + ": " + c.text + "\n  bash cannot read it as one command (a line " +
                             "continues only with a trailing `\\`; a placeholder such as <job id> is not a command):\n" +
                             last_lines(parsed.output, 5));
      }
      const std::vector<Ran> ran = run_block(copy, runnable, s.timeout_s, walk_env(copy, shim, s.slurm));
      // A checked block prints what its page shows, here, after every block before it
      // (Note [Checked examples] in test_docs.cpp; `slurm` ones: Slurm.ReadmeJobLogsMatchRealJobs).
      if (s.checked && !s.slurm && runnable.size() == s.commands.size()) {
        std::string printed;
        for (const Ran& r : ran) printed += r.output;
        const int first = s.commands.front().line;
        const auto c = checked::compare_walked(copy, page, first, printed);
        if (!c) {
          w.problems.push_back(where + ": a checked block whose first `$ ` line the README checks do not find");
        } else {
          ++(c->compared ? w.compared : w.uncompared);
          if (!c->notice.empty()) std::cout << "[walk] " << c->notice << "\n";
          if (!c->report.empty()) {
            std::string commands;
            for (const rb::Command& cmd : s.commands) commands += cmd.text + (cmd.background ? " &\n" : "\n");
            w.problems.push_back(page + ":" + std::to_string(first) + ": the expected output differs from a real run of\n" + commands +
                                 c->report + "the whole output:\n" + printed);
          }
        }
      }
      for (size_t i = 0; i < ran.size(); ++i) {
        const rb::Command& c = runnable[i];
        const int want = c.exit.value_or(0);
        const std::string at = page + ":" + std::to_string(c.line);
        std::ostringstream line;
        line << "[walk] " << at << ": ";
        if (!ran[i].started) {
          line << "not reached (the block stopped before it)";
        } else {
          ++w.ran;
          line << (ran[i].timed_out ? "timed out" : "exit " + std::to_string(ran[i].code)) << " in " << std::fixed
               << std::setprecision(1) << ran[i].seconds << " s";
        }
        const bool ok = ran[i].started && !ran[i].timed_out && ran[i].code == want;
        line << (ok ? "" : "  FAILED, the text says exit " + std::to_string(want)) << "  $ " << one_line(c.text)
             << (c.background ? " &" : "");
        std::cout << line.str() << "\n" << std::flush;
        if (ok) continue;
        std::ostringstream p;
        p << at << ": " << c.text << (c.background ? " &" : "") << "\n  ";
        if (!ran[i].started) p << "never ran: the block stopped at an earlier command";
        else if (ran[i].timed_out) p << "still running after its " << s.timeout_s << " s (<!-- walk: timeout=S --> raises it): killed";
        else p << "exit " << ran[i].code << ", the text says " << want << (c.exit ? " (its `# exit N`)" : " (no `# exit N` on its line)");
        p << "\n  its last lines:\n" << last_lines(ran[i].output, 15);
        w.problems.push_back(p.str());
      }
    }
  }
  return w;
}

// ---- The scratch copy ----

// The repository as a clone has it, in a new folder, with build-cpu linked; the .md files it
// holds go to `md_files`.
std::string make_copy(std::vector<std::string>& md_files) {
  const std::string copy = temp_dir() + "/ddp-course", source = walk_source();
  const ddp::CommandResult files =
      ddp::run_command({"git", "-C", source, "-c", "core.quotepath=off", "ls-files", "-co", "--exclude-standard"}, 60);
  if (files.exit_code != 0) throw std::runtime_error("git ls-files failed: " + files.output);
  for (const std::string& f : rb::lines_of(files.output)) {
    const fs::path from = fs::path(source) / f;
    if (!fs::is_regular_file(fs::symlink_status(from))) continue;  // deleted in the working tree
    fs::create_directories((fs::path(copy) / f).parent_path());
    fs::copy_file(from, fs::path(copy) / f);
    if (fs::path(f).extension() == ".md") md_files.push_back(f);
  }
  fs::create_directory_symlink(DDP_BIN_DIR, copy + "/build-cpu");
  return copy;
}

// A page set in a new folder, for the tests of the walk itself.
std::string pages_in_folder(const std::map<std::string, std::string>& pages) {
  const std::string dir = temp_dir();
  for (const auto& [name, text] : pages) {
    fs::create_directories((fs::path(dir) / name).parent_path());
    std::ofstream(dir + "/" + name) << text;
  }
  return dir;
}

using rb::mentions;

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

}  // namespace

TEST(ReadmeWalk, ReadsCommandsContinuationsBackgroundAndExitComments) {
  const std::string page =
      "Intro `not code`\n"                                        // 1
      "<!-- walk: timeout=300 -->\n"                              // 2
      "```sh\n"                                                   // 3
      "./a --x 1 \\\n"                                            // 4
      "    --y 'two # words'   # a comment\n"                     // 5
      "\n"                                                        // 6
      "# only a comment\n"                                        // 7
      "./b > /dev/null &    # terminal 2\n"                       // 8
      "./c --fail   # exit 75: checkpointed; the same command resumes\n"  // 9
      "./d && ./e\n"                                              // 10
      "```\n"                                                     // 11
      "<!-- not run: needs a GPU -->\n"                           // 12
      "<!-- checked: exit=1 -->\n"                                // 13
      "```console\n"                                              // 14
      "$ ./f &\n"                                                 // 15
      "$ ./g \\\n"                                                // 16
      "  --h\n"                                                   // 17
      "[rank 0/2] printed\n"                                      // 18
      "```\n";                                                    // 19
  const auto fences = rb::fences(page);
  ASSERT_EQ(fences.size(), 2u);
  EXPECT_EQ(fences[0].info, "sh");
  EXPECT_EQ(fences[0].markers, std::vector<std::string>{"<!-- walk: timeout=300 -->"});
  EXPECT_EQ(fences[1].label, "needs a GPU");
  EXPECT_EQ(fences[1].label_line, 12);
  std::vector<std::string> problems;
  const auto steps = steps_of("P.md", page, problems);
  // Read as written; the walk refuses a checked block that it would not run (its one problem).
  EXPECT_EQ(problems, std::vector<std::string>{"P.md:14: a checked block runs and is compared in every walk: no `long` or "
                                               "'not run' marker on it"});
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].timeout_s, 300);
  const auto& c = steps[0].commands;
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].line, 4);
  EXPECT_EQ(c[0].text, "./a --x 1 \\\n    --y 'two # words'");
  EXPECT_FALSE(c[0].exit);
  EXPECT_EQ(c[1].text, "./b > /dev/null");
  EXPECT_TRUE(c[1].background);
  EXPECT_EQ(c[2].line, 9);
  EXPECT_EQ(c[2].exit, 75);
  EXPECT_EQ(c[3].text, "./d && ./e");
  EXPECT_FALSE(c[3].background);
  // The console block: its `$ ` lines; the checked marker's exit is its last command's.
  const auto& d = steps[1].commands;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].background);
  EXPECT_FALSE(d[0].exit);
  EXPECT_EQ(d[1].line, 16);
  EXPECT_EQ(d[1].text, "./g \\\n  --h");
  EXPECT_EQ(d[1].exit, 1);
  EXPECT_EQ(steps[1].not_run, "needs a GPU");
  // Links: relative to the page, first occurrence, never from inside a fence.
  EXPECT_EQ(rb::linked_pages("05_ddp/README.md", "[a](going_further/amp.md) [b](../docs/x.md#part) [c](going_further/amp.md) "
                                                 "[w](https://x.org/y.md)\n```text\n[d](e.md)\n```\n"),
            (std::vector<std::string>{"05_ddp/going_further/amp.md", "docs/x.md"}));
}

TEST(ReadmeWalk, RefusesWhatItCannotReadWithoutGuessing) {
  std::vector<std::string> problems;
  steps_of("P.md",
           "```\n./a\n```\n"                                   // 1: no info string
           "```sh\n$ ./b\n```\n"                               // 4: a prompt in sh, on 5
           "```console\n[rank 0/2] only output\n```\n"         // 7: console without a command
           "<!-- checked -->\n```text\n$ ./c\n```\n"           // 11: checked, not console
           "```bash\nsudo ./d --link 1gbit\n```\n"             // 14: sudo on 15
           "<!-- walk: timeout=1m -->\n```sh\n./e\n```\n"      // 17: unknown option, fence 18
           "<!-- not run: it is output -->\n```text\nx\n```\n"  // 21: marker on text, fence 22
           "<!-- walk: long -->\n\n```sh\n./f\n```\n"        // 25: a marker a blank line away
           "<!-- not run: a GPU -->\nSome prose.\n"     // 30: a marker with no block
           "<!-- walk: long -->\n<!-- checked -->\n```console\n$ ./g\n```\n",  // 32: a checked block in the long tier, fence 34
           problems);
  const std::string all = joined(problems);
  EXPECT_TRUE(mentions(problems, "P.md:1: a fence without an info string")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:5: a `$ ` prompt in a ```sh block")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:7: a ```console block without a `$ ` command")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:11: a checked block shows commands and their output")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:15: `sudo`")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:18: unknown walk option 'timeout=1m'")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:22: a 'not run' marker on a ```text block")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:25: a walk or 'not run' marker that no fence follows")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:30: a walk or 'not run' marker that no fence follows")) << all;
  EXPECT_TRUE(mentions(problems, "P.md:34: a checked block runs and is compared in every walk")) << all;
  EXPECT_EQ(problems.size(), 10u) << all;
}

TEST(ReadmeWalk, ReadingOrderIsTheTopPageThenEachChapterWithWhatItLinks) {
  const std::map<std::string, std::string> pages = {
      {"README.md", "[ops](docs/ci.md) [one](01_a/README.md) [two](02_b/README.md) [obs](docs/observing.md)"},
      {"01_a/README.md", "[more](going_further.md) [next](../02_b/README.md) [obs](../docs/observing.md)"},
      {"01_a/going_further.md", "[deeper](deeper.md) [back](README.md)"},
      {"01_a/deeper.md", ""},
      {"02_b/README.md", "[obs](../docs/observing.md)"},
      {"docs/ci.md", "[bench](../bench/README.md)"},
      {"docs/observing.md", "[more](more.md)"},
      {"docs/more.md", ""},
      {"bench/README.md", ""},
      {"docs/lost.md", "```sh\n./x\n```\n"},
  };
  std::vector<std::string> names;
  for (const auto& [n, _] : pages) names.push_back(n);
  const auto order = reading_order(names, [&](const std::string& p) { return pages.at(p); });
  // 01's own pages as deep as they link; docs/observing.md read with 01, what it links at the end.
  EXPECT_EQ(order, (std::vector<std::string>{"README.md", "01_a/README.md", "01_a/going_further.md", "01_a/deeper.md", "docs/observing.md",
                                             "02_b/README.md", "docs/ci.md", "bench/README.md", "docs/more.md"}));
  EXPECT_TRUE(has_runnable_block(pages.at("docs/lost.md")));
  EXPECT_FALSE(has_runnable_block("```text\n$ x\n```\n"));
}

// The walk must be able to fail: a command that exits 2 where its text promises 0, a block that
// cannot run here and carries no label, a hang, a placeholder; and not fail what is right (a promised exit 75,
// a background job waited for, a variable kept within the block, a labelled block left out).
TEST(ReadmeWalk, CatchesAWrongExitAnUnlabelledBlockAndAHang) {
  const std::string dir = pages_in_folder({{"README.md",
                                            "```sh\n"                                        // 1
                                            "X=5\n"                                          // 2
                                            "test \"$X\" = 5\n"                              // 3
                                            "(sleep 0.2; exit 3) &   # exit 3\n"             // 4
                                            "bash -c 'exit 75'   # exit 75: checkpointed\n"  // 5
                                            "bash -c 'exit 2'\n"                             // 6
                                            "```\n"                                          // 7
                                            "```sh\n"                                        // 8
                                            "./build-cuda/05_ddp --backend nccl\n"           // 9
                                            "```\n"                                          // 10
                                            "<!-- not run: needs a GPU -->\n"                // 11
                                            "```sh\n"                                        // 12
                                            "./build-cuda/05_ddp --backend nccl\n"           // 13
                                            "```\n"                                          // 14
                                            "<!-- walk: timeout=1 -->\n"                     // 15
                                            "```sh\n"                                        // 16
                                            "sleep 30\n"                                     // 17
                                            "echo never\n"                                   // 18
                                            "```\n"                                          // 19
                                            "<!-- walk: long -->\n"                          // 20
                                            "```sh\n"                                        // 21
                                            "bash -c 'exit 4'\n"                             // 22
                                            "```\n"                                          // 23
                                            "```sh\n"                                        // 24
                                            "scancel --signal=USR2 <job id>\n"               // 25
                                            "echo the next command still runs\n"             // 26
                                            "```\n"}});                                      // 27
  const double t0 = ddp::monotonic_seconds();
  const Walked w = walk(dir, {"README.md"}, WalkOptions{});
  const std::string all = joined(w.problems);
  EXPECT_LT(ddp::monotonic_seconds() - t0, 15) << "the hang was not cut at its 1 s timeout";
  EXPECT_TRUE(mentions(w.problems, "README.md:6: bash -c 'exit 2'\n  exit 2, the text says 0")) << all;
  EXPECT_TRUE(mentions(w.problems, "README.md:9: ./build-cuda/05_ddp --backend nccl\n  exit 127, the text says 0")) << all;
  EXPECT_TRUE(mentions(w.problems, "README.md:17: sleep 30\n  still running after its 1 s")) << all;
  EXPECT_TRUE(mentions(w.problems, "README.md:18: echo never\n  never ran")) << all;
  EXPECT_TRUE(mentions(w.problems, "README.md:25: scancel --signal=USR2 <job id>\n  bash cannot read it as one command")) << all;
  EXPECT_EQ(w.problems.size(), 5u) << all;
  EXPECT_EQ(w.ran, 8);  // lines 2-6, 9, 17 and 26 (not 18, after the hang; not 25)
  EXPECT_EQ(w.not_run, 1);  // the labelled block
  EXPECT_EQ(w.skipped, 1);  // the long one
  // The same long block in the long tier: it runs, and its wrong exit is caught.
  const Walked l = walk(dir, {"README.md"}, WalkOptions{true, false, ""});
  EXPECT_TRUE(mentions(l.problems, "README.md:22: bash -c 'exit 4'\n  exit 4, the text says 0")) << joined(l.problems);
  fs::remove_all(dir);
}

// A checked block is compared with what its commands printed in the walk's copy: processes may
// interleave, paths into the copy read as the example checkout, a changed line is named.
TEST(ReadmeWalk, ComparesACheckedBlockWithWhatItPrinted) {
  const std::string dir = pages_in_folder({{"README.md",
                                            "<!-- checked -->\n"                                      // 1
                                            "```console\n"                                            // 2
                                            "$ (sleep 0.2; echo '[rank 1/2] b') &\n"                  // 3
                                            "$ echo '[rank 0/2] a'; echo \"[rank 0/2] in $PWD/runs\"\n"  // 4
                                            "[rank 0/2] a\n"                                          // 5
                                            "[rank 1/2] b\n"                                          // 6
                                            "[rank 0/2] in /home/you/ddp-course/runs\n"               // 7
                                            "```\n"                                                   // 8
                                            "<!-- checked: exit=3 -->\n"                              // 9
                                            "```console\n"                                            // 10
                                            "$ bash -c 'echo \"[rank 0/2] step 6 of 6\"; exit 3'\n"     // 11
                                            "[rank 0/2] step 5 of 6\n"                                // 12
                                            "```\n"}});                                               // 13
  const Walked w = walk(dir, {"README.md"}, WalkOptions{});
  if (w.uncompared) GTEST_SKIP() << "this build does not compare checked blocks (not build-cpu)";
  const std::string all = joined(w.problems);
  EXPECT_EQ(w.compared, 2);
  EXPECT_TRUE(mentions(w.problems, "README.md:11: the expected output differs from a real run of\nbash -c")) << all;
  EXPECT_TRUE(mentions(w.problems, "README.md:12: - [rank 0/2] step 5 of 6")) << all;
  EXPECT_EQ(w.problems.size(), 1u) << all;
  fs::remove_all(dir);
}

// Note [Walking the READMEs]: the real pages, after what scripts/run.sh runs, in one copy.
TEST(ReadmeWalk, EveryCommandInReadingOrder) {
  ASSERT_NE(read_text(walk_source() + "/scripts/run.sh").find("scripts/course.sh"), std::string::npos)
      << "scripts/run.sh no longer runs scripts/course.sh's chapters: the walk's first step (kAfterRunSh) must follow what it runs";
  const double t0 = ddp::monotonic_seconds();
  std::vector<std::string> md_files;
  const std::string copy = make_copy(md_files);
  auto read = [&](const std::string& p) { return read_text(copy + "/" + p); };
  const std::vector<std::string> order = reading_order(md_files, read);
  std::cout << "[walk] reading order:";
  for (const auto& p : order) std::cout << " " << p;
  std::cout << "\n[walk] in " << copy << "\n";
  for (const std::string& p : md_files) {
    if (std::find(order.begin(), order.end(), p) == order.end() && has_runnable_block(read(p))) {
      ADD_FAILURE() << p << ": holds commands, but no page of the reading order links it (Note [Walking the READMEs])";
    }
  }
  WalkOptions opt;
  opt.long_tier = std::getenv("DDP_LONG_TESTS") && std::string(std::getenv("DDP_LONG_TESTS")) == "1";
  opt.root = ::geteuid() == 0;
  opt.slurm_missing = slurm_skip_reason();
  // Where scripts/run.sh leaves a learner: the course run once, its runs/ in place.
  const std::string shim = shim_folder(copy);
  const Ran first = run_block(copy, {{0, kAfterRunSh}}, 300, walk_env(copy, shim, false))[0];
  std::cout << "[walk] scripts/run.sh's last step: " << kAfterRunSh << ": exit " << first.code << " in " << first.seconds << " s\n";
  ASSERT_TRUE(first.finished && first.code == 0) << kAfterRunSh << " failed in the copy:\n" << last_lines(first.output, 30);
  const Walked w = walk(copy, order, opt);
  for (const std::string& p : w.problems) ADD_FAILURE() << p;
  EXPECT_GT(w.compared + w.uncompared, 0) << "no checked block was run";
  std::cout << "[walk] " << w.ran << " command(s) run, " << w.skipped << " skipped (tier, root, Slurm), " << w.not_run
            << " labelled not run; " << w.compared << " checked block(s) printed what their page shows"
            << (w.uncompared ? " (" + std::to_string(w.uncompared) + " not compared: another build)" : "") << "; "
            << w.problems.size() << " problem(s); " << std::fixed << std::setprecision(0) << ddp::monotonic_seconds() - t0
            << " s in all\n";
  // The copy's runs/ take 100 MB and more: kept only when asked.
  if (const char* keep = std::getenv("DDP_WALK_KEEP"); keep && std::string(keep) == "1") {
    std::cout << "[walk] the copy is kept (DDP_WALK_KEEP=1): " << copy << "\n";
    keep_scratch_folders();
  } else {
    fs::remove_all(fs::path(copy).parent_path());
    if (HasFailure()) std::cout << "[walk] DDP_WALK_KEEP=1 keeps the copy for a look\n";
  }
}
