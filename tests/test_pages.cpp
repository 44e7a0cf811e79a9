// The pages cannot contradict themselves: every figure from one source (Note [Every figure has
// its source]), no history (Note [A page is not a log]), counts from what they count (Note
// [Counts from what they count]), claims about PyTorch citing PyTorch (Note [PyTorch cited]).
// Each check is a function of a page's text, proved on planted faults as well as on the pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pages.h"
#include "proc.h"
#include "readme_blocks.h"

namespace fs = std::filesystem;
namespace rb = ddp_test::readme;
using namespace ddp_test::pages;

// Note [Every figure has its source]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A figure a reader reads about a run must come from a run, and the same run must not be told
// with different figures on different pages (the CNN step once had six overlap shares; the C++
// trainer against Python two ratios). So every figure of every Markdown page's prose (tables are
// prose) has one source, checked here. A figure is a number with a unit (%, ms, µs, s, min,
// MiB, GB/s, samples/s, ...), a ratio written 1.6x or 1.6×, or "N of M runs". Its source is:
//   - a checked block of the same page (its output holds the same digits), or
//   - a marker on the line(s) right above its paragraph, `<!-- figures: SOURCE ... -->`, each
//     SOURCE a path relative to the page:
//       NAME.json   a result file (results/, or the reference step's figures): written by the
//                   script that measured it (scripts/results.sh, bench/results.py), holding
//                   "command" (whose first word is that script, which names the file), "cpu"
//                   and "date"; the figure is one of its numbers, rounded as the page writes it.
//                   A range that varies is two of its numbers: the file holds the runs.
//       PAGE.md     the checked blocks of another page, never its prose: a page typed by hand
//                   is no source (PAGE.md#section is refused);
//       any other file of the repository (a header, a script): the code's own constants (a
//                   default, a limit), standing in its text.
// A paragraph is a run of prose lines without a blank line. Inline code counts (it may quote a
// run's output); a flag's value has no unit (`--max-steps 50`), so it is not a figure.
namespace {

struct PageFigure {
  int line;
  std::string number, text;  // "85", "85 %"
};

// The figures in one prose line (HTML comments and link targets removed; a code span counts:
// `overlap: 66.26% ...` quotes a run).
std::vector<PageFigure> figures_in(int line, const std::string& raw) {
  static const std::regex comment("<!--.*?-->"), target(R"(\]\([^)]*\))");
  static const std::string units = R"((%|ms|µs|us|s|min|MiB|KiB|MB|GB|GiB|KB|samples/s|GB/s|Gbit/s|Mbit/s|minutes|seconds)(?=$|[^\w/]))";
  static const std::regex figure(R"((^|[^\w.,\-/]|\d[-–])(\d{1,3}(,\d{3})+|\d+(\.\d+)?)\s?)" + units);
  // The left end of a range, "47 to 75 %", "0.93-1.00x": a figure of the same unit.
  static const std::regex left_end(R"((^|[^\w.,\-/])(\d+(\.\d+)?)\s?(-|–|to)\s?(?=\d+(\.\d+)?(\s?)" + units + R"(|[x×](?=$|[^\w]))))");
  static const std::regex ratio(R"((^|[^\w.,\-/]|\d[-–])(\d+(\.\d+)?)(x|×)(?=$|[^\w]))");
  static const std::regex runs(R"(\b(\d+) (of|out of) (\d+) (runs|tries|repeats)\b)");
  std::string text = std::regex_replace(raw, comment, " ");
  text = std::regex_replace(text, target, "]");
  std::vector<PageFigure> out;
  auto add = [&](const std::string& digits, const std::string& shown) {
    std::string n = digits;
    n.erase(std::remove(n.begin(), n.end(), ','), n.end());
    out.push_back({line, n, shown});
  };
  for (std::sregex_iterator it(text.begin(), text.end(), figure), end; it != end; ++it) add((*it)[2], (*it)[2].str() + " " + (*it)[5].str());
  for (std::sregex_iterator it(text.begin(), text.end(), left_end), end; it != end; ++it) add((*it)[2], (*it)[2].str() + " (a range's start)");
  for (std::sregex_iterator it(text.begin(), text.end(), ratio), end; it != end; ++it) add((*it)[2], (*it)[2].str() + (*it)[4].str());
  for (std::sregex_iterator it(text.begin(), text.end(), runs), end; it != end; ++it) {
    add((*it)[1], (*it)[0].str() + " (" + (*it)[1].str() + ")");
    add((*it)[3], (*it)[0].str() + " (" + (*it)[3].str() + ")");
  }
  return out;
}

// Whether `number` stands in `text` as a number of its own (not inside 1.85, 285 or a hash's d86d;
// a unit may follow it: 14.5s).
bool holds_number(const std::string& text, const std::string& number) {
  for (size_t at = text.find(number); at != std::string::npos; at = text.find(number, at + 1)) {
    const auto digit = [&](size_t i) { return i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); };
    const bool before = at > 0 && (std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_' ||
                                   (text[at - 1] == '.' && at > 1 && digit(at - 2)));
    const size_t e = at + number.size();
    const bool after = digit(e) || (e + 1 < text.size() && text[e] == '.' && digit(e + 1));
    if (!before && !after) return true;
  }
  return false;
}

// Every number of a JSON document.
void json_numbers(const nlohmann::json& j, std::vector<double>& out) {
  if (j.is_number()) out.push_back(j.get<double>());
  else if (j.is_structured()) for (const auto& v : j) json_numbers(v, out);
}

// `number` ("2.9") is one of `values` (by its size) rounded to as many decimals as it is written with.
bool rounds_to(const std::vector<double>& values, const std::string& number) {
  const size_t dot = number.find('.');
  const int decimals = dot == std::string::npos ? 0 : static_cast<int>(number.size() - dot - 1);
  const double want = std::stod(number), scale = std::pow(10.0, decimals);
  // A page writes a signed figure's size and says which way in words ("2.1 % fast" for -2.1).
  return std::any_of(values.begin(), values.end(), [&](double v) { return std::llround(std::fabs(v) * scale) == std::llround(want * scale); });
}

// The text of a page's checked blocks, and its prose lines.
std::string checked_text(const std::string& text) {
  std::string out;
  for (const rb::Fence& f : rb::fences(text)) {
    if (!rb::marker_options(f, "checked")) continue;
    for (const std::string& l : f.body) out += l + "\n";
  }
  return out;
}
std::vector<std::pair<int, std::string>> prose_of(const std::string& text) {
  std::istringstream in(text);
  return read_page_text(in).prose;
}

// What is wrong with `path` as a result file ("" when nothing): it must parse, hold "command",
// "cpu" and "date", and its command's first word must be a file of the repository that names it.
std::string result_file_problem(const std::string& path, const std::string& body,
                                const std::function<std::string(const std::string&)>& read) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "is not JSON";
  for (const char* key : {"command", "cpu", "date"}) {
    if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) {
      return std::string("has no \"") + key + "\": not a result file written by a script (scripts/results.sh)";
    }
  }
  std::istringstream words(j["command"].get<std::string>());
  std::string script;
  words >> script;
  if (script == "python3" || script == "bash") words >> script;
  const std::string code = read(script);
  if (code.empty()) return "names the command '" + script + "', which is no file of the repository";
  std::string stem = fs::path(path).filename().string();
  stem = stem.substr(0, stem.size() - 5);  // without .json
  if (code.find(stem) == std::string::npos) return "is not written by its command " + script + " (it never names " + stem + ")";
  return "";
}

}  // namespace

// Runs a page check on every Markdown page of the repository, each problem a failure; returns
// how many pages it read.
int check_every_page(const std::function<std::vector<std::string>(const std::string& page, const std::string& text)>& check) {
  int pages = 0;
  for (const std::string& page : markdown_files()) {
    ++pages;
    for (const std::string& p : check(page, read_source_file(page))) ADD_FAILURE() << p;
  }
  return pages;
}

// The figures of one page without a source; `read` gives a repository file's text ("" when it
// does not exist), by its path from the repository's root. See Note [Every figure has its source].
std::vector<std::string> figures_without_source(const std::string& name, const std::string& text,
                                                const std::function<std::string(const std::string&)>& read) {
  std::vector<std::string> problems;
  const std::string own = checked_text(text);
  const fs::path dir = fs::path(name).parent_path();
  static const std::regex marker(R"(^<!-- figures: (.+) -->\s*$)"), any_marker(R"(^<!--.*-->\s*$)");
  // One source of a paragraph, read once: these numbers (a result file), or this text (another
  // page's checked blocks, a code file).
  struct Source {
    std::vector<double> numbers;
    std::string text;
  };
  std::map<std::string, Source> cache;
  auto resolve = [&](const std::string& src) -> const Source& {
    if (const auto it = cache.find(src); it != cache.end()) return it->second;
    Source& s = cache[src];
    const std::string file = (dir / src).lexically_normal().string();
    const bool md = src.size() > 3 && src.substr(src.size() - 3) == ".md";
    const std::string body = src.find('#') == std::string::npos ? read(file) : "";
    if (src.find('#') != std::string::npos) {
      problems.push_back(name + ": the figures' source " + src + " is a section of a page typed by hand: a page is never a source "
                         "(cite the result file the figures come from, or the page itself: its checked blocks)");
    } else if (src == "vary" || src == "code") {
      problems.push_back(name + ": the figures' source '" + src + "' says nothing of where they come from: name the result file "
                         "that holds the runs (a range too), or the file that holds the constant");
    } else if (body.empty()) {
      problems.push_back(name + ": the figures' source " + src + " (" + file + ") does not exist");
    } else if (src.size() > 5 && src.substr(src.size() - 5) == ".json") {
      if (const std::string why = result_file_problem(file, body, read); !why.empty()) problems.push_back(name + ": the figures' source " + src + " " + why);
      else json_numbers(nlohmann::json::parse(body), s.numbers);
    } else {
      s.text = md ? checked_text(body) : body;
    }
    return s;
  };
  std::vector<std::string> sources;  // of the paragraph being read
  std::vector<PageFigure> figures;
  bool in_paragraph = false;
  auto close = [&] {
    for (const PageFigure& f : figures) {
      if (holds_number(own, f.number)) continue;
      const bool found = std::any_of(sources.begin(), sources.end(), [&](const std::string& src) {
        const Source& s = resolve(src);
        return rounds_to(s.numbers, f.number) || holds_number(s.text, f.number);
      });
      if (!found) {
        problems.push_back(name + ":" + std::to_string(f.line) + ": '" + f.text + "' has no source" +
                           (sources.empty() ? ": no checked block of this page holds it, and its paragraph names no <!-- figures: ... -->"
                                            : " among its paragraph's: " + ::testing::PrintToString(sources)));
      }
    }
    for (const std::string& src : sources) resolve(src);  // a marker's sources exist even where its figures are elsewhere
    sources.clear(), figures.clear(), in_paragraph = false;
  };
  for (const auto& [n, line] : prose_of(text)) {
    std::smatch m;
    if (std::regex_match(line, m, marker)) {
      if (in_paragraph) close();
      std::istringstream words(m[1].str());
      for (std::string w; words >> w;) sources.push_back(w);
      continue;
    }
    if (std::regex_match(line, any_marker)) continue;
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (in_paragraph) close();
      continue;
    }
    in_paragraph = true;
    for (PageFigure& f : figures_in(n, line)) figures.push_back(f);
  }
  close();
  return problems;
}

TEST(Docs, EveryFigureHasItsSource) {
  const int pages = check_every_page([](const std::string& page, const std::string& text) {
    return figures_without_source(page, text, read_source_file);
  });
  EXPECT_GE(pages, 40);
}

// Every result file of results/ is one: written by its script, with the command, the CPU and the
// date (a file typed by hand, or left by a script that no longer writes it, fails here).
TEST(Docs, EveryResultFileNamesTheScriptThatWroteIt) {
  const fs::path dir = fs::path(DDP_SOURCE_DIR) / "results";
  int files = 0;
  if (fs::exists(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      ++files;
      const std::string rel = fs::relative(e.path(), DDP_SOURCE_DIR).string();
      const std::string why = result_file_problem(rel, read_source_file(rel), read_source_file);
      EXPECT_EQ(why, "") << rel << " " << why;
    }
  }
  std::cout << files << " result files\n";
}

// The check on planted faults: a figure no block or result has, a result file typed by hand, a
// figure of a section of a page typed by hand, a range marked 'vary', a constant marked 'code',
// a stale figure; and what is right passes.
TEST(Docs, FigureCheckFindsPlantedContradictions) {
  const std::map<std::string, std::string> files = {
      {"results/step.json", R"({"command": "bench/step.py --x", "cpu": "a CPU", "date": "d", "hidden_pct": 85.424, "buckets": [{"starts_ms": 2.86}], "runs": [47.1, 74.9]})"},
      {"bench/step.py", "write_result('step', ...)\n"},
      {"results/typed.json", R"({"hidden_pct": 70})"},
      {"results/orphan.json", R"({"command": "bench/step.py", "cpu": "c", "date": "d", "x": 4})"},
      {"other.md", "<!-- checked -->\n```console\n$ x\noverlap: 61.50%\n```\n\n3.68 s typed by hand.\n"},
      {"docs/measured.md", "# M\n\n## Runs\n\n| run | s |\n|---|---|\n| a | 3.68 |\n"},
      {"buckets.h", "constexpr size_t kCap = 25;  // MiB\n"},
  };
  auto read = [&](const std::string& p) { return files.count(p) ? files.at(p) : std::string(); };
  const std::string good =
      "# Page\n\n<!-- checked -->\n```console\n$ run\nloss 0.4798, overlap: 71.81% in 14.5s (1.00x)\n```\n"
      "It printed 71.81% here, in 14.5 s.\n\n"                                  // from the checked block
      "<!-- figures: results/step.json -->\nThe step hid 85 % of its all-reduce; bucket 0 was ready 2.9 ms in.\n\n"
      "<!-- figures: other.md -->\nThe resumed run: 61.50 %.\n\n"
      "<!-- figures: results/step.json -->\nThe share moves from run to run: 47 to 75 %, the median 85.4 %.\n\n"
      "<!-- figures: buckets.h -->\nBuckets close at 25 MiB. Run `--max-steps 50 --timeout 60` (a command: 50 is no figure).\n\n"
      "It printed `overlap: 71.81% of all-reduce time`, 1.00x its peer; 2024-2025 is no range of a unit.\n";
  EXPECT_FALSE(holds_number("params fingerprint d0b2c9788535d86d", "86")) << "a hash's digits are no figure";
  EXPECT_TRUE(holds_number("exited 0 in 14.5s", "14.5"));
  const auto none = figures_without_source("page.md", good, read);
  EXPECT_TRUE(none.empty()) << ::testing::PrintToString(none);
  const std::string bad =
      "# Page\n\n<!-- checked -->\n```console\n$ run\noverlap: 71.81%\n```\n"  // 1-7
      "Another run printed 66.26 % here.\n\n"                                  // 8: no source
      "<!-- figures: results/step.json -->\nThe step hid 70 % of its all-reduce.\n\n"  // 11: stale, not the result's
      "<!-- figures: docs/measured.md#runs -->\nIt took 3.68 s.\n\n"           // 14: a section typed by hand
      "<!-- figures: vary -->\nThe share varies from run to run: 47 to 75 %.\n\n"  // 17: 'vary' names no runs
      "<!-- figures: missing.json -->\nA 5 ms step.\n\n"                       // 20: no such file
      "<!-- figures: results/typed.json -->\nThe step hid 70 %.\n\n"          // 23: a file typed by hand
      "<!-- figures: other.md -->\nIt took 3.68 s.\n\n"                        // 26: the other page's prose, not its blocks
      "<!-- figures: code -->\nBuckets close at 25 MiB, 1.2x faster.\n\n"     // 29: 'code' names no file
      "<!-- figures: results/orphan.json -->\nIt took 4 s.\n\n"              // 32: its command never names it
      "It printed `overlap: 66.73% of all-reduce time`, 0.93-1.4× Python, 19 of 20 runs.\n";  // 34
  const auto found = figures_without_source("page.md", bad, read);
  const std::string all = ::testing::PrintToString(found);
  auto has = [&](const std::string& s) { return rb::mentions(found, s); };
  EXPECT_TRUE(has("page.md:8: '66.26 %' has no source")) << all;
  EXPECT_TRUE(has("page.md:11: '70 %' has no source")) << all;
  EXPECT_TRUE(has("page.md:14: '3.68 s' has no source")) << all;
  EXPECT_TRUE(has("docs/measured.md#runs is a section of a page typed by hand")) << all;
  EXPECT_TRUE(has("page.md:17: '47 (a range's start)' has no source")) << all;
  EXPECT_TRUE(has("page.md:17: '75 %' has no source")) << all;
  EXPECT_TRUE(has("the figures' source 'vary' says nothing of where they come from")) << all;
  EXPECT_TRUE(has("page.md:20: '5 ms' has no source")) << all;
  EXPECT_TRUE(has("the figures' source missing.json")) << all;
  EXPECT_TRUE(has("results/typed.json has no \"command\"")) << all;
  EXPECT_TRUE(has("page.md:23: '70 %' has no source")) << all;
  EXPECT_TRUE(has("page.md:26: '3.68 s' has no source")) << all;
  EXPECT_TRUE(has("page.md:29: '25 MiB' has no source")) << all;
  EXPECT_TRUE(has("page.md:29: '1.2x' has no source")) << all;
  EXPECT_TRUE(has("the figures' source 'code' says nothing")) << all;
  EXPECT_TRUE(has("results/orphan.json is not written by its command bench/step.py")) << all;
  EXPECT_TRUE(has("page.md:32: '4 s' has no source")) << all;
  EXPECT_TRUE(has("page.md:34: '66.73 %' has no source")) << all;
  EXPECT_TRUE(has("page.md:34: '1.4×' has no source")) << all;
  EXPECT_TRUE(has("page.md:34: '0.93 (a range's start)' has no source")) << all;
  EXPECT_TRUE(has("page.md:34: '19 of 20 runs (19)' has no source")) << all;
  EXPECT_TRUE(has("page.md:34: '19 of 20 runs (20)' has no source")) << all;
  EXPECT_EQ(found.size(), 22u) << all;
}

// Note [A page is not a log]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A page states what the code measures now, once, with the command that measures it: a run of
// last week kept beside today's tells two stories, and the reader cannot tell which is true. Git
// keeps the history. So no page's prose holds a date, a commit of this repository or an issue
// number of its tracker. Citations of other projects' trackers (pytorch#126510, NVIDIA/nccl
// issue 181, torchft#186, an arXiv id) are not history and stay.
std::vector<std::string> history_in(const std::string& name, const std::string& text) {
  std::vector<std::string> problems;
  static const std::regex date(R"(\b20\d\d-[01]\d-[0-3]\d\b)"), comment("<!--.*?-->");
  static const std::regex commit(R"(\b(commits?|at|of|tree|before|after|since|from) ([0-9a-f]{7,12})(\.\.[0-9a-f]{7,12})?\b)");
  static const std::regex hash(R"((^|[\s(])([0-9a-f]*[a-f][0-9a-f]*[0-9][0-9a-f]*|[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*)([\s).,;:]|$))");
  static const std::regex issue(R"(\b[Ii]ssues? #?\d+)"), elsewhere(R"(pytorch|torchft|nccl|github|submitit|lightning|nanotron|arxiv|gloo|slurm|#\d)", std::regex::icase);
  for (const auto& [n, raw] : prose_of(text)) {
    const std::string line = std::regex_replace(raw, comment, " ");
    const std::string where = name + ":" + std::to_string(n) + ": ";
    if (std::regex_search(line, date)) problems.push_back(where + "a date (a page says what the code does now; git keeps when)");
    std::smatch m;
    bool named = std::regex_search(line, m, commit);
    for (std::sregex_iterator it(line.begin(), line.end(), hash), end; !named && it != end; ++it) {
      const size_t len = (*it)[2].length();
      named = len >= 7 && len <= 12;
    }
    if (named) problems.push_back(where + "a commit (a page says what the code does now; git keeps which)");
    if (std::regex_search(line, issue) && !std::regex_search(line, elsewhere)) {
      problems.push_back(where + "an issue number of this project (a page says what the code does now; the tracker keeps why)");
    }
  }
  return problems;
}

TEST(Docs, NoPageKeepsHistory) { check_every_page(history_in); }

TEST(Docs, HistoryCheckFindsPlantedDatesCommitsAndIssues) {
  const std::string good =
      "# P\n\nThe fingerprint `a64c7e99350aa575` and the run's 2026 steps.\nPyTorch's pytorch#126510 and NVIDIA/nccl issue 181.\n"
      "```\n2026-11-28 in a code block is output\n```\n";
  EXPECT_TRUE(history_in("p.md", good).empty()) << ::testing::PrintToString(history_in("p.md", good));
  const std::string bad =
      "# P\n\nMeasured 2026-11-24 on this machine.\n"  // 3
      "A fresh clone of d959d35 took 28 min.\n"        // 4
      "Since issue 41 the walk is faster.\n"           // 5
      "The tree at commit 94f55dd.\n";                 // 6
  const auto found = history_in("p.md", bad);
  const std::string all = ::testing::PrintToString(found);
  EXPECT_TRUE(rb::mentions(found, "p.md:3: a date")) << all;
  EXPECT_TRUE(rb::mentions(found, "p.md:4: a commit")) << all;
  EXPECT_TRUE(rb::mentions(found, "p.md:5: an issue number")) << all;
  EXPECT_TRUE(rb::mentions(found, "p.md:6: a commit")) << all;
  EXPECT_EQ(found.size(), 4u) << all;
}

// Note [Counts from what they count]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A count typed by hand is right the day it is typed: "chapters 01-06" stayed when 07 came, the
// exercise table stopped at 05.9 when 05.10 came. So the pages' counts are held to what they count:
//   - the exercises are the checks in exercises/checks/ (ID.sh), the coding ones those with a
//     solution patch (exercises/solutions/ID.patch): every id a page names exists, the tables of
//     the pages that list them all (kExerciseTables) name every one, and "seven coding exercises"
//     is the number there is;
//   - the chapters are scripts/course.sh's course_chapters: "all seven chapters" is their number,
//     and a range of chapters in a paragraph about what run.sh or course.sh runs spans them all;
//   - a number of tests is never typed: ctest counts them (`ctest -N`).
namespace {

const std::vector<std::string> kExerciseTables = {"README.md", "exercises/README.md", "docs/teaching.md"};

struct Course {
  std::set<std::string> exercises, coding;  // "05.10"
  std::vector<std::string> chapters;       // "01_join_group", ...
};

Course the_course() {
  Course c;
  const fs::path root = DDP_SOURCE_DIR;
  static const std::regex id(R"(\d\d\.\d+)");
  for (const auto& e : fs::directory_iterator(root / "exercises/checks")) {
    const std::string stem = e.path().stem().string();
    if (e.path().extension() == ".sh" && std::regex_match(stem, id)) c.exercises.insert(stem);
  }
  for (const auto& e : fs::directory_iterator(root / "exercises/solutions")) {
    const std::string stem = e.path().stem().string();
    if (e.path().extension() == ".patch" && std::regex_match(stem, id)) c.coding.insert(stem);
  }
  std::smatch m;
  const std::string course = read_source_file("scripts/course.sh");
  if (std::regex_search(course, m, std::regex(R"(course_chapters=\(([^)]*)\))"))) {
    std::istringstream words(m[1].str());
    for (std::string w; words >> w;) c.chapters.push_back(w);
  }
  return c;
}

int number_word(const std::string& w) {
  static const std::vector<std::string> words = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                                 "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                                                 "seventeen", "eighteen", "nineteen", "twenty", "twenty-one", "twenty-two",
                                                 "twenty-three", "twenty-four", "twenty-five"};
  std::string lower;
  for (const char ch : w) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const auto it = std::find(words.begin(), words.end(), lower);
  if (it != words.end()) return static_cast<int>(it - words.begin());
  return std::all_of(w.begin(), w.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }) && !w.empty() ? std::stoi(w) : -1;
}

}  // namespace

// The counts of one page that disagree with what they count (Note [Counts from what they count]).
std::vector<std::string> counts_wrong(const std::string& name, const std::string& text, const Course& c) {
  std::vector<std::string> problems;
  static const std::regex id(R"((^|[^\w.])(0\d\.\d{1,2})(?![\w.]\d))"), comment("<!--.*?-->");
  static const std::regex exercises(R"(\b([\w-]+) (coding |observation )?exercises\b)", std::regex::icase);
  static const std::regex chapters(R"(\b([\w-]+) chapters\b)", std::regex::icase);
  static const std::regex range(R"(\b(0\d)\s?(?:-|–|to)\s?(0\d)\b)"), runner(R"(run\.sh|course\.sh)");
  static const std::regex tests(R"(\b\d[\d,]* (cpu |cuda )?tests\b)");
  std::set<std::string> named;
  std::string paragraph;
  std::vector<int> lines;
  auto close_paragraph = [&] {
    if (std::regex_search(paragraph, runner) && !c.chapters.empty()) {
      const std::string first = c.chapters.front().substr(0, 2), last = c.chapters.back().substr(0, 2);
      for (std::sregex_iterator it(paragraph.begin(), paragraph.end(), range), end; it != end; ++it) {
        if ((*it)[1] != first || (*it)[2] != last) {
          problems.push_back(name + ":" + std::to_string(lines.front()) + ": chapters " + (*it)[0].str() + " where run.sh and course.sh run " +
                             first + "-" + last + " (scripts/course.sh's course_chapters)");
        }
      }
    }
    paragraph.clear(), lines.clear();
  };
  for (const auto& [n, raw] : prose_of(text)) {
    const std::string line = std::regex_replace(raw, comment, " ");
    const std::string where = name + ":" + std::to_string(n) + ": ";
    if (line.find_first_not_of(" \t") == std::string::npos) {
      close_paragraph();
      continue;
    }
    paragraph += line + " ", lines.push_back(n);
    for (std::sregex_iterator it(line.begin(), line.end(), id), end; it != end; ++it) {
      const std::string e = (*it)[2];
      named.insert(e);
      if (!c.exercises.count(e)) problems.push_back(where + "exercise " + e + " does not exist (exercises/checks/" + e + ".sh)");
    }
    for (std::sregex_iterator it(line.begin(), line.end(), exercises), end; it != end; ++it) {
      const int said = number_word((*it)[1]);
      const std::string kind = (*it)[2];
      const size_t is = kind.empty() ? c.exercises.size() : kind == "coding " ? c.coding.size() : c.exercises.size() - c.coding.size();
      if (said >= 0 && static_cast<size_t>(said) != is) {
        problems.push_back(where + "'" + (*it)[0].str() + "': there are " + std::to_string(is) + " (exercises/checks, exercises/solutions)");
      }
    }
    for (std::sregex_iterator it(line.begin(), line.end(), chapters), end; it != end; ++it) {
      const int said = number_word((*it)[1]);
      if (said >= 0 && static_cast<size_t>(said) != c.chapters.size()) {
        problems.push_back(where + "'" + (*it)[0].str() + "': the course has " + std::to_string(c.chapters.size()) + " (scripts/course.sh)");
      }
    }
    static const std::regex kind(R"((0\d\.\d{1,2}) [^;|()]*\((coding|observation)\))");
    for (std::sregex_iterator it(line.begin(), line.end(), kind), end; it != end; ++it) {
      const bool coding = c.coding.count((*it)[1]) > 0;
      if (coding != ((*it)[2] == "coding")) {
        problems.push_back(where + "exercise " + (*it)[1].str() + " is " + (coding ? "a coding" : "an observation") +
                           " exercise (exercises/solutions/" + (*it)[1].str() + ".patch " + (coding ? "exists" : "does not exist") + "), not " +
                           (*it)[2].str());
      }
    }
    if (std::smatch m; std::regex_search(line, m, tests)) {
      problems.push_back(where + "'" + m[0].str() + "': a number of tests typed by hand (ctest -N counts them)");
    }
  }
  close_paragraph();
  if (std::find(kExerciseTables.begin(), kExerciseTables.end(), name) != kExerciseTables.end()) {
    for (const std::string& e : c.exercises) {
      if (!named.count(e)) problems.push_back(name + ": its exercise table leaves out " + e + " (exercises/checks/" + e + ".sh)");
    }
  }
  return problems;
}

TEST(Docs, CountsAreWhatTheyCount) {
  const Course c = the_course();
  ASSERT_GE(c.exercises.size(), 10u);
  ASSERT_GE(c.chapters.size(), 7u);
  check_every_page([&](const std::string& page, const std::string& text) { return counts_wrong(page, text, c); });
  // What run.sh and course.sh say of themselves, in their comments, is held the same way.
  for (const std::string& script : {"scripts/run.sh", "scripts/course.sh"}) {
    std::string comments;
    std::istringstream in(read_source_file(script));
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("#", 0) == 0) comments += l.substr(1) + "\n";
    }
    comments = "run.sh " + comments;  // every comment there is about what the script runs
    for (const std::string& p : counts_wrong(script, comments, c)) ADD_FAILURE() << p;
  }
}

// Note [What a page runs is built]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A learner who ran scripts/run.sh has build-cpu/ with what run.sh built: the chapters
// (course_chapters) and the programs besides them (course_tools, scripts/course.sh). Every
// program a runnable block of a page starts from build-cpu/ is one of those, or a command above
// it on the same page builds it (`scripts/build.sh cpu NAME`). The walk cannot see a missing one:
// it runs the pages against the tests' build, where everything is built.
std::vector<std::string> unbuilt_programs(const std::string& page, const std::string& text, std::set<std::string> built) {
  std::vector<std::string> problems;
  static const std::regex program(R"(build-cpu/([A-Za-z0-9_]+)(/?))"), builds(R"(scripts/build\.sh\s+cpu((\s+[A-Za-z0-9_]+)*))");
  for (const rb::Fence& f : rb::fences(text)) {
    if (f.info != "sh" && f.info != "bash" && f.info != "shell" && f.info != "console") continue;
    for (const rb::Command& c : rb::commands(f.body, f.line + 1, f.info == "console")) {
      std::smatch m;
      if (std::regex_search(c.text, m, builds)) {
        std::istringstream words(m[1].str());
        for (std::string w; words >> w;) built.insert(w);
      }
      for (auto it = std::sregex_iterator(c.text.begin(), c.text.end(), program); it != std::sregex_iterator(); ++it) {
        const std::string name = (*it)[1].str();
        if ((*it)[2].str() == "/" || built.count(name)) continue;  // a folder of the build (tests/), or built
        problems.push_back(page + ":" + std::to_string(c.line) + ": runs build-cpu/" + name +
                           ", which scripts/run.sh does not build (course_chapters, course_tools) nor a command above it");
      }
    }
  }
  return problems;
}

std::set<std::string> what_run_sh_builds() {
  std::set<std::string> built;
  const std::string course = read_source_file("scripts/course.sh");
  for (const char* array : {"course_chapters", "course_tools"}) {
    std::smatch m;
    if (std::regex_search(course, m, std::regex(std::string(array) + R"(=\(([^)]*)\))"))) {
      std::istringstream words(m[1].str());
      for (std::string w; words >> w;) built.insert(w);
    }
  }
  return built;
}

TEST(Docs, EveryProgramAPageRunsIsBuiltByRunSh) {
  const std::set<std::string> built = what_run_sh_builds();
  ASSERT_TRUE(built.count("05_ddp") && built.count("ddp_sim")) << ::testing::PrintToString(built);
  EXPECT_NE(read_source_file("scripts/run.sh").find("course_tools"), std::string::npos) << "run.sh builds course_tools";
  check_every_page([&](const std::string& page, const std::string& text) { return unbuilt_programs(page, text, built); });
}

TEST(Docs, UnbuiltProgramCheckFindsAPlantedOne) {
  const std::string page = "# P\n\n```sh\n./build-cpu/05_ddp --help\n./build-cpu/allreduce_bench --help\n```\n\n"
                           "```sh\nscripts/build.sh cpu cost_model\n./build-cpu/cost_model\nbuild-cpu/tests/ddp_tests\n```\n";
  const auto p = unbuilt_programs("P.md", page, {"05_ddp"});
  ASSERT_EQ(p.size(), 1u) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("P.md:5: runs build-cpu/allreduce_bench"), std::string::npos) << p[0];
}

// `scripts/exercise.sh list` names every exercise once, in the order the pages' tables give them:
// by chapter, then by number (05.2 before 05.10).
TEST(Docs, ExerciseListIsTheCoursesOrder) {
  const Course c = the_course();
  const auto r = ddp_test::run_one({{std::string(DDP_SOURCE_DIR) + "/scripts/exercise.sh", "list"}}, 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> listed;
  std::istringstream in(r.output);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) listed.push_back(l.substr(0, l.find(' ')));
  }
  std::vector<std::string> want(c.exercises.begin(), c.exercises.end());
  auto key = [](const std::string& id) { return std::make_pair(std::stoi(id.substr(0, 2)), std::stoi(id.substr(3))); };
  std::sort(want.begin(), want.end(), [&](const std::string& a, const std::string& b) { return key(a) < key(b); });
  EXPECT_EQ(listed, want);
}

TEST(Docs, CountCheckFindsPlantedWrongCounts) {
  Course c;
  c.exercises = {"01.1", "05.9", "05.10", "07.1"};
  c.coding = {"07.1"};
  c.chapters = {"01_a", "02_b", "03_c"};
  const std::string good =
      "# E\n\n| 01.1 | 05.9 | 05.10 Two ranks (observation) | 07.1 Keep (coding) |\n\nOne coding exercise and three observation exercises, four exercises in all.\n\n"
      "`scripts/run.sh` runs chapters 01-03, all three chapters. Version 1.13, ratio 0.93.\n";
  const auto none = counts_wrong("README.md", good, c);
  EXPECT_TRUE(none.empty()) << ::testing::PrintToString(none);
  const std::string bad =
      "# E\n\n| 01.1 | 05.9 | 07.1 | 07.2 | 05.10 A title (coding) |\n\n"          // 3: 07.2 does not exist; 05.10 observes
      "Two coding exercises.\n\n"                                                 // 5
      "`scripts/run.sh` runs chapters 01-02,\nand then all four chapters.\n\n"   // 7, 8
      "The cpu build runs 290 tests.\n";                                          // 10
  const auto found = counts_wrong("README.md", bad, c);
  const std::string all = ::testing::PrintToString(found);
  auto has = [&](const std::string& s) { return rb::mentions(found, s); };
  EXPECT_TRUE(has("README.md:3: exercise 07.2 does not exist")) << all;
  EXPECT_TRUE(has("README.md:5: 'Two coding exercises': there are 1")) << all;
  EXPECT_TRUE(has("README.md:7: chapters 01-02 where run.sh and course.sh run 01-03")) << all;
  EXPECT_TRUE(has("README.md:8: 'four chapters': the course has 3")) << all;
  EXPECT_TRUE(has("README.md:10: '290 tests': a number of tests typed by hand")) << all;
  EXPECT_TRUE(has("README.md:3: exercise 05.10 is an observation exercise")) << all;
  EXPECT_EQ(found.size(), 6u) << all;
  const auto short_table = counts_wrong("docs/teaching.md", "# T\n\n| 01.1 | 05.9 | 07.1 |\n", c);
  EXPECT_EQ(short_table, std::vector<std::string>{"docs/teaching.md: its exercise table leaves out 05.10 (exercises/checks/05.10.sh)"});
}

// Note [PyTorch cited]
// ~~~~~~~~~~~~~~~~~~~~
// The course is held to PyTorch bit for bit; what it says PyTorch does must be held to PyTorch's
// source the same way, or a learner carries a wrong rule away (the pages once said static_graph
// lifts DDP's one-bucket first iteration; distributed.py's _ddp_init_helper keeps it). So a
// sentence of prose that says what PyTorch does (PyTorch, its DDP, FSDP2, DCP or torchrun as the
// subject of a verb of doing) cites, in its paragraph, the source file (`distributed.py`,
// `torch/distributed/fsdp/_fully_shard/_fsdp_state.py`, `reducer.cpp`) and the version it read
// (1.13, 2.11). Where a test can check such a claim against the reference PyTorch, one does.
std::vector<std::string> uncited_pytorch_claims(const std::string& name, const std::string& text) {
  std::vector<std::string> problems;
  static const std::regex comment("<!--.*?-->"), code_span("`[^`]*`");
  static const std::regex claim(
      R"(\b(PyTorch|PyTorch's DDP|FSDP2|fully_shard|DCP|torchrun)\b[^.;]{0,80}?\b(does|sets|keeps|uses|divides|sums|builds|rebuilds|reads|writes|prefetches|calls|waits|starts|puts|cuts|rounds|packs|holds|wraps|frees|broadcasts|averages|refuses|raises|orders|allocates|gathers|shards|reshards|re-shards|splits|copies|launches|registers|fires|runs|syncs|checks)\b)");
  static const std::regex file(R"(\b[\w/]*\w+\.(py|cpp|hpp|h)\b)"), version(R"(\b(1\.13|2\.\d{1,2})\b)");
  std::string paragraph;
  int first = 0;
  auto close = [&] {
    std::smatch m;
    if (std::regex_search(paragraph, m, claim)) {
      const bool cites = std::regex_search(paragraph, file) && std::regex_search(paragraph, version);
      if (!cites) {
        problems.push_back(name + ":" + std::to_string(first) + ": '" + m[0].str() + "...' says what PyTorch does without citing where "
                           "(its file and function, and the version read)");
      }
    }
    paragraph.clear(), first = 0;
  };
  static const std::regex heading(R"(^#{1,6}\s.*)");
  for (const auto& [n, raw] : prose_of(text)) {
    const std::string line = std::regex_replace(raw, comment, " ");
    if (line.find_first_not_of(" \t") == std::string::npos || std::regex_match(line, heading)) {
      close();
      continue;
    }
    if (!first) first = n;
    paragraph += line + " ";
  }
  close();
  return problems;
}

TEST(Docs, ClaimsAboutPyTorchCitePyTorch) { check_every_page(uncited_pytorch_claims); }

TEST(Docs, ClaimCheckFindsPlantedUncitedClaims) {
  const std::string good =
      "# P\n\nPyTorch's DDP builds one bucket in the first iteration whatever static_graph says\n"
      "(`torch/nn/parallel/distributed.py`, `_ddp_init_helper`, PyTorch 2.11).\n\n"
      "We train with PyTorch installed.\n\n## In PyTorch\nThe Python this chapter writes in C++.\n";
  EXPECT_TRUE(uncited_pytorch_claims("p.md", good).empty()) << ::testing::PrintToString(uncited_pytorch_claims("p.md", good));
  const std::string bad =
      "# P\n\nWith static_graph, PyTorch builds the buckets from the first iteration.\n\n"  // 3: no citation
      "FSDP2 prefetches one unit in forward (fully_shard).\n\n"                           // 5: no file, no version
      "DCP reads the chunks it needs (PyTorch 2.11).\n";                                  // 7: a version, no file
  const auto found = uncited_pytorch_claims("p.md", bad);
  const std::string all = ::testing::PrintToString(found);
  EXPECT_TRUE(rb::mentions(found, "p.md:3:")) << all;
  EXPECT_TRUE(rb::mentions(found, "p.md:5:")) << all;
  EXPECT_TRUE(rb::mentions(found, "p.md:7:")) << all;
  EXPECT_EQ(found.size(), 3u) << all;
}

// Note [A Note is where its pointer says]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// "Note [X] in path/file" sends a reader to a file: that file must define the Note (a line that
// is a comment's marker and `Note [X]` alone, or `Note [X]:` and text in CMake's files, the
// convention of every Note here). The path is from the repository's root, or from the pointing
// file's folder, or a file name that only one file of the repository has. Pointers are read from
// every source and page (.md, .cpp, .h, .py, .sh, CMakeLists.txt), a comment wrapped over lines
// joined first; a pointer with no file ("Note [X]" alone) is left to the reader.
namespace {

std::vector<std::string> source_and_page_files() {
  return repository_files([](const fs::path& p) {
    const std::string ext = p.extension().string();
    return ext == ".md" || ext == ".cpp" || ext == ".h" || ext == ".py" || ext == ".sh" || p.filename() == "CMakeLists.txt";
  });
}

// The text with each line's comment marker (//, #) and indentation dropped, lines joined by a blank.
std::string joined_prose(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {  // by hand: a regex a line takes seconds over the repository
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos) i = line.size();
    if (line.compare(i, 2, "//") == 0) i = line.find_first_not_of('/', i);
    else if (i < line.size() && line[i] == '#') i = line.find_first_not_of('#', i);
    if (i == std::string::npos) i = line.size();
    i = std::min(line.find_first_not_of(" \t", i), line.size());
    out += line.substr(i) + " ";
  }
  return out;
}

bool defines_note(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("Note [") == std::string::npos) continue;
    const std::string bare = std::regex_replace(line, std::regex(R"(^\s*(//+|#+|\"\"\")?\s*|\s+$)"), "");
    const std::string head = "Note [" + name + "]";
    if (bare == head || bare.rfind(head + ":", 0) == 0) return true;  // CMake's: "# Note [X]: text"
  }
  return false;
}

// "<file>: Note [X] in <path>, which does not define it" for each wrong pointer of `text`;
// `read` gives a repository file's text ("" when there is none), `all` every file's path.
std::vector<std::string> note_pointer_problems(const std::string& file, const std::string& text,
                                               const std::function<std::string(const std::string&)>& read,
                                               const std::vector<std::string>& all) {
  std::vector<std::string> problems;
  const std::string prose = joined_prose(text);
  static const std::regex pointer(R"(^Note \[([^\]]+)\],? in `?([A-Za-z0-9_][A-Za-z0-9_./-]*(\.cpp|\.h|\.py|\.sh|\.md|CMakeLists\.txt)))");
  for (size_t at = prose.find("Note ["); at != std::string::npos; at = prose.find("Note [", at + 1)) {
    const std::string near_text = prose.substr(at, 400);  // a regex over the whole text takes seconds
    std::smatch m;
    if (!std::regex_search(near_text, m, pointer)) continue;
    const std::string name = std::regex_replace(m[1].str(), std::regex(R"(\s+)"), " ");
    std::string target = m[2].str();
    if (read(target).empty()) {  // from the pointing file's folder, or the one file of that name
      const std::string near = (fs::path(file).parent_path() / target).lexically_normal().string();
      std::vector<std::string> named;
      for (const std::string& f : all) {
        if (fs::path(f).filename() == fs::path(target).filename() && f.size() >= target.size() &&
            f.compare(f.size() - target.size(), target.size(), target) == 0) named.push_back(f);
      }
      if (!read(near).empty()) target = near;
      else if (named.size() == 1) target = named.front();
    }
    const std::string target_text = read(target);
    if (target_text.empty()) {
      problems.push_back(file + ": Note [" + name + "] in " + target + ", a file the repository does not have (or has more than one of)");
    } else if (!defines_note(target_text, name)) {
      problems.push_back(file + ": Note [" + name + "] in " + target + ", which does not define it");
    }
  }
  return problems;
}

}  // namespace

TEST(Docs, EveryNotePointerNamesTheFileThatDefinesIt) {
  std::vector<std::string> problems;
  const std::vector<std::string> all = source_and_page_files();
  for (const std::string& f : all) {
    for (const std::string& p : note_pointer_problems(f, read_source_file(f), read_source_file, all)) problems.push_back(p);
  }
  for (const std::string& p : problems) ADD_FAILURE() << p;
}

TEST(Docs, NotePointerCheckFindsAPlantedWrongFile) {
  const std::map<std::string, std::string> files = {
      {"a.cpp", "// Note [Two halves]\n// ~~~~~~~~~~~~~~~~\n// why\n"},
      {"b.py", "# Note [Long name that wraps]\n# ~~~~\n"},
  };
  const auto read = [&](const std::string& f) { return files.count(f) ? files.at(f) : std::string(); };
  const std::vector<std::string> all = {"a.cpp", "b.py"};
  // (Each pointer split into two literals: this file's own text is checked too.)
  const std::string good = "// See Note [Two halves]" " in a.cpp, and Note [Long name\n// that wraps]" " in b.py.\n";
  EXPECT_TRUE(note_pointer_problems("c.cpp", good, read, all).empty());
  EXPECT_EQ(note_pointer_problems("c.cpp", "// Note [Two halves]" " in b.py\n", read, all).size(), 1u);
  EXPECT_EQ(note_pointer_problems("c.md", "Note [Two halves]" " in `x/none.cpp`\n", read, all).size(), 1u);
  EXPECT_TRUE(note_pointer_problems("c.md", "Note [Two halves] alone\n", read, all).empty());
}
