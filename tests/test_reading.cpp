// Chapters' reading paths: the lines a learner reads, counted from the files, and held to a budget.
//
// Note [A reading path that counts itself]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A newcomer reads a chapter's README, then what it sends them to, and counts the lines. Each
// chapter's README says what to read in a list whose first line gives the total:
//   Read, in this order (412 lines with this page up to its exercises):
//   1. `main.cpp` (219): ...
//   2. `common/group/init.cpp`: `join_or_explain` (38): ...          a function
//   3. `ddp.h` down to "Composing onto the class" (58): ...           a file's top
//   4. `common/data/sampler.h`: Note [Sampler semantics] (21): ...    a Note
//   5. `main.cpp` from "int main(" (129): ...                          a file's end
// and, for what only an exercise needs, a line of the same items:
//   For the exercises, also: `ddp_interface.cpp`: `describe_buckets` (27, exercise 05.2).
// Every count is what the file holds now: a function from the line that opens its definition to
// the first `}` at the start of a line; a Note from its `// Note [...]` line to the end of that
// comment; "down to" the lines above the first that holds the text, "from" that line to the
// end. The total is the README's lines above "## Exercises" (but the invisible `<!-- ... -->`
// marker lines) plus the list's. A file an exercise names (`*.cpp`, `*.h`; on the README or
// on one of the chapter's going-further pages) is on one of the two lists. Chapter 05, the
// longest lesson, may ask 700 lines; every other chapter 450 (issue 39's budget, as a newcomer
// counted it).
// So an edit that lengthens a lesson fails here, in its own run, until the page says the new
// figure, and a lesson cannot outgrow its budget unnoticed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "proc.h"

namespace fs = std::filesystem;

namespace {

struct Item {
  int line = 0;          // in the README
  std::string path;      // as written: relative to the chapter's folder or to the repository's root
  std::string function;  // a function's name, or ""
  std::string note;      // a Note's name, or ""
  std::string down_to;   // the file's lines above the first that holds this, or ""
  std::string from;      // the file's lines from the first that holds this to its end, or ""
  int stated = 0;
};

std::vector<std::string> lines_of_text(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The items of one line: `path`[: `function` | : Note [name] | down to "text" | from "text"]
// (count, or, after such an item, `function` (count or Note [name] (count: another part of the
// same file.
const std::regex& item_pattern() {
  static const std::regex re(
      R"re((?:`([^`\s]+\.(?:cpp|h|sh|py|sbatch))`(?::\s*)?)?(?:`([A-Za-z_0-9:]+)`|Note \[([^\]]+)\]| down to "([^"]+)"| from "([^"]+)")?\s*\((\d+)[,)])re");
  return re;
}

std::vector<Item> items_in(int line, const std::string& text, std::string& last_path) {
  std::vector<Item> items;
  for (std::sregex_iterator it(text.begin(), text.end(), item_pattern()), end; it != end; ++it) {
    const std::smatch& m = *it;
    if (!m[1].matched && !m[2].matched && !m[3].matched) continue;  // a figure in parentheses, not an item
    if (m[1].matched) last_path = m[1];
    if (last_path.empty()) continue;
    items.push_back({line, last_path, m[2], m[3], m[4], m[5], std::stoi(m[6])});
  }
  return items;
}

struct ReadingPath {
  int stated_total = -1;       // -1: no list
  int total_line = 0;
  std::vector<Item> lesson;    // the numbered list
  std::vector<Item> exercises; // "For the exercises, also: ..."
  int page_lines = 0;          // the README above "## Exercises"
  std::vector<std::string> exercise_files;  // *.cpp / *.h an exercise of the README names
};

// The `*.cpp` and `*.h` files a line of an exercise names, added to `files`.
void add_named_files(const std::string& line, std::vector<std::string>& files) {
  static const std::regex named_file(R"(`([^`\s]*[A-Za-z_0-9]\.(?:cpp|h))`)");
  for (std::sregex_iterator it(line.begin(), line.end(), named_file), end; it != end; ++it) files.push_back((*it)[1]);
}

ReadingPath read_path(const std::string& readme) {
  ReadingPath r;
  const std::vector<std::string> lines = lines_of_text(readme);
  const std::regex head(R"(^Read, in this order \((\d+) lines with this page up to its exercises\):)");
  const std::regex numbered(R"(^\d+\.\s)");
  bool in_list = false, in_exercises = false, in_exercise_list = false;
  std::string last_path;
  const std::regex marker(R"(^<!--((?!-->).)*-->\s*$)");  // one comment, nothing visible beside it
  int markers = 0;  // the page's lines that are only an invisible <!-- marker --> (Note [Checked examples])
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    const int n = static_cast<int>(i) + 1;
    std::smatch m;
    if (std::regex_search(l, m, head)) {
      r.stated_total = std::stoi(m[1]), r.total_line = n, in_list = true;
      continue;
    }
    if (in_list && std::regex_search(l, numbered)) {
      for (auto& item : items_in(n, l, last_path)) r.lesson.push_back(item);
      continue;
    }
    if (in_list && !l.empty() && l[0] == ' ') {  // an item's continuation
      for (auto& item : items_in(n, l, last_path)) r.lesson.push_back(item);
      continue;
    }
    in_list = false;
    if (l.rfind("For the exercises, also:", 0) == 0) in_exercise_list = true;
    if (l.empty()) in_exercise_list = false;
    if (in_exercise_list) {
      for (auto& item : items_in(n, l, last_path)) r.exercises.push_back(item);
    }
    if (l.rfind("## ", 0) == 0) {
      if (l == "## Exercises" && !in_exercises) in_exercises = true, r.page_lines = n - 1 - markers;
      else if (in_exercises) in_exercises = false;
    }
    if (!in_exercises && std::regex_match(l, marker)) ++markers;  // invisible on the page
    if (in_exercises) {
      add_named_files(l, r.exercise_files);
    }
  }
  if (!in_exercises && r.page_lines == 0) r.page_lines = static_cast<int>(lines.size()) - markers;  // no exercises
  return r;
}

// The lines an item asks to read, or -1 with `why` set.
int count_item(const Item& item, const fs::path& chapter, const fs::path& root, std::string& why) {
  fs::path file = chapter / item.path;
  if (!fs::exists(file)) file = root / item.path;
  std::ifstream in(file);
  if (!in) {
    why = "no such file";
    return -1;
  }
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  const int n = static_cast<int>(lines.size());
  if (!item.down_to.empty() || !item.from.empty()) {
    const std::string& text = item.down_to.empty() ? item.from : item.down_to;
    for (int i = 0; i < n; ++i) {  // not where a comment quotes it ("... down to \"text\"")
      const size_t at = lines[i].find(text);
      if (at != std::string::npos && (at == 0 || lines[i][at - 1] != '"')) return item.down_to.empty() ? n - i : i;
    }
    why = "no line holds \"" + text + "\"";
    return -1;
  }
  if (!item.function.empty()) {
    // The definition: a line that starts in column 0 and names the function, called.
    const std::regex opens("(^|[^A-Za-z_0-9])" + item.function + R"(\()");
    for (int i = 0; i < n; ++i) {
      if (lines[i].empty() || lines[i][0] == ' ' || lines[i][0] == '/' || lines[i][0] == '#') continue;
      if (!std::regex_search(lines[i], opens)) continue;
      for (int j = i; j < n; ++j) {
        if (lines[j] == "}" || (j > i && lines[j].rfind("}", 0) == 0)) return j - i + 1;
      }
    }
    why = "no definition of " + item.function + "() starts a line";
    return -1;
  }
  if (!item.note.empty()) {
    const std::string heading = "Note [" + item.note + "]";
    for (int i = 0; i < n; ++i) {
      const size_t at = lines[i].find(heading);
      if (at == std::string::npos) continue;
      const std::string before = lines[i].substr(0, at);
      if (before.find_first_not_of(" /") != std::string::npos) continue;  // a mention, not the Note
      int j = i;
      while (j + 1 < n) {
        const std::string next = lines[j + 1];
        const size_t text = next.find_first_not_of(' ');
        if (text == std::string::npos || next.compare(text, 2, "//") != 0) break;
        static const std::regex next_note(R"(^\s*// Note \[[^\]]+\]\s*$)");  // a Note's title line alone
        if (std::regex_match(next, next_note)) break;  // the next Note (a line that cites one goes on)
        ++j;
      }
      return j - i + 1;
    }
    why = "no " + heading + " opens a comment";
    return -1;
  }
  return n;
}

// What is wrong with a chapter's reading path: "" lines when nothing is.
std::vector<std::string> reading_path_problems(const fs::path& chapter, const fs::path& root, const std::string& readme,
                                               int budget, int* total_out = nullptr) {
  std::vector<std::string> problems;
  const std::string page = chapter.filename().string() + "/README.md";
  ReadingPath r = read_path(readme);
  // An exercise on a going-further page of the chapter ("## Exercise 05.7: ...", to the next
  // heading) is one of the chapter's too: the files it names are on the same two lists.
  if (fs::is_directory(chapter / "going_further")) {
    for (const auto& entry : fs::directory_iterator(chapter / "going_further")) {
      if (entry.path().extension() != ".md") continue;
      std::ifstream in(entry.path());
      bool in_exercise = false;
      for (std::string l; std::getline(in, l);) {
        if (l.rfind("## ", 0) == 0) in_exercise = l.rfind("## Exercise", 0) == 0;
        if (in_exercise) add_named_files(l, r.exercise_files);
      }
    }
  }
  if (r.stated_total < 0) {
    problems.push_back(page + ": no \"Read, in this order (N lines with this page up to its exercises):\" list");
    return problems;
  }
  if (r.lesson.empty()) problems.push_back(page + ":" + std::to_string(r.total_line) + ": the list names no file");
  int total = r.page_lines;
  auto check = [&](const std::vector<Item>& items, bool counted) {
    for (const Item& item : items) {
      std::string why;
      const int got = count_item(item, chapter, root, why);
      const std::string what = "`" + item.path + "`" + (item.function.empty() ? "" : ": `" + item.function + "`") +
                               (item.note.empty() ? "" : ": Note [" + item.note + "]") +
                               (item.down_to.empty() ? "" : " down to \"" + item.down_to + "\"") +
                               (item.from.empty() ? "" : " from \"" + item.from + "\"");
      if (got < 0) {
        problems.push_back(page + ":" + std::to_string(item.line) + ": " + what + ": " + why);
        continue;
      }
      if (got != item.stated) {
        problems.push_back(page + ":" + std::to_string(item.line) + ": " + what + " says " + std::to_string(item.stated) +
                           " lines; it has " + std::to_string(got));
      }
      if (counted) total += got;
    }
  };
  check(r.lesson, true);
  check(r.exercises, false);
  if (total != r.stated_total) {
    problems.push_back(page + ":" + std::to_string(r.total_line) + ": says " + std::to_string(r.stated_total) +
                       " lines to read; the page above its exercises (" + std::to_string(r.page_lines) +
                       ") and the list make " + std::to_string(total));
  }
  if (total > budget) {
    problems.push_back(page + ": " + std::to_string(total) + " lines to read for the lesson, over its budget of " +
                       std::to_string(budget));
  }
  for (const std::string& f : r.exercise_files) {
    auto named = [&](const std::vector<Item>& items) {
      for (const Item& item : items) {
        if (item.path == f || fs::path(item.path).filename() == fs::path(f).filename()) return true;
      }
      return false;
    };
    if (!named(r.lesson) && !named(r.exercises)) {
      problems.push_back(page + ": an exercise sends the student to `" + f +
                         "`, which neither the reading list nor \"For the exercises, also:\" names");
    }
  }
  if (total_out) *total_out = total;
  return problems;
}

}  // namespace

TEST(Docs, ReadingPathsAreTrueAndWithinBudget) {
  const fs::path root = DDP_SOURCE_DIR;
  std::vector<fs::path> chapters;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, std::regex(R"(\d\d_.+)"))) chapters.push_back(entry.path());
  }
  std::sort(chapters.begin(), chapters.end());
  for (const fs::path& chapter : chapters) {
    const std::string name = chapter.filename().string();
    std::ifstream in(chapter / "README.md");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int total = 0;
    for (const std::string& p : reading_path_problems(chapter, root, text, name == "05_ddp" ? 700 : 450, &total)) {
      ADD_FAILURE() << p;
    }
    std::printf("%s: %d lines to read for its lesson\n", name.c_str(), total);
  }
  EXPECT_GE(chapters.size(), 6u);
}

// The same check on a chapter made here, right and then wrong in each way it can drift.
TEST(Docs, ReadingPathCheckFindsPlantedDrift) {
  const fs::path root = ddp_test::temp_dir();
  const fs::path chapter = root / "09_demo";
  fs::create_directories(chapter);
  std::ofstream(chapter / "main.cpp") << "// one\n// two\nint main() {\n  return helper(1);\n}\n";  // 5 lines
  std::ofstream(chapter / "lib.cpp") << "// Note [Why]\n// because\n// of this\n\nint helper(int x) {\n"
                                        "  return x;\n}\n// ---- the rest ----\nint other() { return 0; }\n";
  const std::string good =
      "# 09\n"                                                                                 // 1
      "Read, in this order (20 lines with this page up to its exercises):\n"                   // 2
      "1. `main.cpp` (5): the lesson;\n"                                                       // 3
      "2. `lib.cpp`: `helper` (3) and\n"                                                       // 4
      "   its Note [Why] (3).\n"                                                               // 5: the same file
      "3. `lib.cpp` down to \"the rest\" (7), `lib.cpp` from \"the rest\" (2).\n"                // 6
      "\n<!-- figures: code -->\n## Exercises\n"                                               // 7, (a marker), 8
      "**09.1** Change `lib.cpp`.\n"
      "For the exercises, also: `main.cpp` (5, exercise 09.1).\n";
  // 7 lines above "## Exercises" (its invisible marker left out) + 5 + 3 + 3 (an item on a
  // continuation line) + 7 + 2 = 27.
  std::string right = std::regex_replace(good, std::regex(R"(\(20 lines)"), "(27 lines");
  int total = 0;
  auto problems = reading_path_problems(chapter, root, right, 30, &total);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
  EXPECT_EQ(total, 27);

  auto finds = [&](const std::string& text, int budget, const std::string& what) {
    const auto p = reading_path_problems(chapter, root, text, budget);
    EXPECT_TRUE(std::any_of(p.begin(), p.end(), [&](const std::string& s) { return s.find(what) != std::string::npos; }))
        << "wanted \"" << what << "\" in " << ::testing::PrintToString(p);
  };
  finds(good, 30, "says 20 lines to read");                                                      // a wrong total
  finds(std::regex_replace(right, std::regex(R"(`helper` \(3\))"), "`helper` (2)"), 30, "says 2 lines; it has 3");
  finds(right, 26, "over its budget of 26");
  finds(std::regex_replace(right, std::regex(R"(from "the rest" \(2\))"), "from \"the rest\" (3)"), 30,
        "from \"the rest\" says 3 lines; it has 2");
  // A line with text beside its markers is seen on the page, and counted.
  finds(std::regex_replace(right, std::regex("<!-- figures: code -->"), "<!-- a --> seen <!-- b -->"), 30, "and the list make 28");
  finds(std::regex_replace(right, std::regex("Change `lib.cpp`"), "Change `extra.cpp`"), 30, "`extra.cpp`, which neither");
  finds(std::regex_replace(right, std::regex("`helper`"), "`gone`"), 30, "no definition of gone()");
  finds(std::regex_replace(right, std::regex(R"(Note \[Why\])"), "Note [Because]"), 30, "no Note [Because]");
  finds(std::regex_replace(right, std::regex("Read, in this order"), "Read these"), 30, "no \"Read, in this order");
  // The file grows: the page's figure is now wrong.
  std::ofstream(chapter / "main.cpp", std::ios::app) << "// a sixth line\n";
  finds(right, 30, "`main.cpp` says 5 lines; it has 6");
}

// Note [Past the lesson, one line a step]
// 05's main.cpp is the trainer a learner reads top to bottom, but it also runs what later pages
// teach (06's preemption, 07's memory count, the going-further flags). Each such line says
// `past the lesson:` so that a first reading can step over it, and there are few of them: at most
// one in each of main.cpp's steps ("// 1." to "// 7.", and the lines above step 1), eight in all.
// A feature composes behind RunExtras (beyond/extras.h) and the wrappers it puts around the DDP
// class, the loss function and the optimizer, not as a new line in the loop.
namespace {

std::vector<std::string> past_the_lesson_problems(const std::string& main_cpp, int per_step, int in_all) {
  std::vector<std::string> problems;
  std::istringstream in(main_cpp);
  std::string line, step = "above step 1";
  bool in_main = false;
  int total = 0;
  std::vector<std::pair<std::string, int>> counts;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("int main(", 0) == 0) in_main = true;
    if (!in_main) continue;
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(^\s*// (\d)\. )"))) step = "step " + m[1].str();
    if (line.find("past the lesson") == std::string::npos) continue;
    ++total;
    if (counts.empty() || counts.back().first != step) counts.emplace_back(step, 0);
    if (++counts.back().second > per_step) {
      problems.push_back("main.cpp:" + std::to_string(n) + ": a line past the lesson beyond " + std::to_string(per_step) +
                         " in " + step);
    }
  }
  if (total > in_all) {
    problems.push_back("main.cpp: " + std::to_string(total) + " lines past the lesson, more than " + std::to_string(in_all));
  }
  return problems;
}

}  // namespace

TEST(Docs, FiveMainCarriesOneLinePastTheLessonAStepAtMost) {
  std::ifstream in(fs::path(DDP_SOURCE_DIR) / "05_ddp" / "main.cpp");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(text.find("int main("), std::string::npos);
  EXPECT_NE(text.find("past the lesson"), std::string::npos);  // the marker is there to count
  for (const std::string& p : past_the_lesson_problems(text, 1, 8)) ADD_FAILURE() << p;
}

TEST(Docs, PastTheLessonCheckFindsPlantedLines) {
  const std::string good =
      "// header: a line past the lesson says so\nint main() {\n  a();  // past the lesson: x\n"
      "  // 1. Join\n  b();  // past the lesson: y\n  // 2. Data\n  c();\n  d();  // past the lesson: z\n}\n";
  EXPECT_TRUE(past_the_lesson_problems(good, 1, 8).empty());
  const std::string two_in_a_step = std::regex_replace(good, std::regex("  c\\(\\);"), "  c();  // past the lesson: w");
  const auto p = past_the_lesson_problems(two_in_a_step, 1, 8);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("step 2"), std::string::npos) << p[0];
  EXPECT_EQ(past_the_lesson_problems(good, 1, 2).size(), 1u);  // three in all, two allowed
}
