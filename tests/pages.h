// defines: the repository's Markdown pages as the page tests read them: every page found
// (markdown_files), a page's prose lines, headings' anchors and sections (read_page), GitHub's
// anchor of a heading (slug), a repository file's text (read_source_file); header-only.
#pragma once
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ddp_test::pages {

// The repository's files that `keep` accepts, relative to its root, sorted: each outside the
// build folders, runs/ and the hidden folders (.git, .venv, .cache), which is what .gitignore
// leaves. Found, not listed, so a file added anywhere is checked without a list to update.
inline std::vector<std::string> repository_files(const std::function<bool(const std::filesystem::path&)>& keep) {
  const std::filesystem::path root = DDP_SOURCE_DIR;
  std::vector<std::string> files;
  for (auto it = std::filesystem::recursive_directory_iterator(root); it != std::filesystem::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      const bool ignored = name.rfind(".", 0) == 0 || (it.depth() == 0 && (name.rfind("build", 0) == 0 || name == "runs"));
      if (ignored) it.disable_recursion_pending();
      continue;
    }
    if (keep(it->path())) files.push_back(std::filesystem::relative(it->path(), root).string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Every Markdown page of the repository (a page added anywhere, docs/ or a chapter's "Going
// further" pages, is checked without a list to update), the top README first.
inline std::vector<std::string> markdown_files() {
  std::vector<std::string> files = repository_files([](const std::filesystem::path& p) { return p.extension() == ".md"; });
  std::stable_sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return (a == "README.md") != (b == "README.md") ? a == "README.md" : a < b;
  });
  return files;
}

// GitHub's anchor for a heading: lower case, punctuation dropped, each blank a hyphen
// ("## Chapter 06's tests" -> chapter-06s-tests); bytes of other scripts are kept.
inline std::string slug(const std::string& heading) {
  std::string s;
  for (const unsigned char c : heading) {
    if (std::isalnum(c) || c == '_' || c == '-' || c >= 0x80) s += static_cast<char>(std::tolower(c));
    else if (c == ' ') s += '-';
  }
  return s;
}

// A page's lines outside fenced code blocks, numbered from 1, and the anchors of its headings
// (a repeated heading's anchor gets -1, -2, ... as on GitHub).
struct Page {
  std::vector<std::pair<int, std::string>> prose;
  std::set<std::string> anchors;
  std::map<std::string, std::string> sections;  // anchor -> the lines under that heading, fences too
};
inline Page read_page_text(std::istream& in) {
  Page page;
  bool fenced = false;
  std::map<std::string, int> seen;
  std::string section;
  int n = 0;
  for (std::string l; std::getline(in, l);) {
    ++n;
    const size_t first = l.find_first_not_of(' ');
    if (first != std::string::npos && l.compare(first, 3, "```") == 0) fenced = !fenced;
    else if (!fenced) {
      page.prose.emplace_back(n, l);
      static const std::regex heading(R"(#{1,6}\s+(.*?)\s*#*\s*)");
      std::smatch m;
      if (std::regex_match(l, m, heading)) {
        const std::string a = slug(m[1]);
        const int k = seen[a]++;
        section = k == 0 ? a : a + "-" + std::to_string(k);
        page.anchors.insert(section);
      }
    }
    if (!section.empty()) page.sections[section] += l + "\n";
  }
  return page;
}
inline Page read_page(const std::filesystem::path& path) {
  std::ifstream in(path);
  return read_page_text(in);
}


// A repository file's text, "" when there is none.
inline std::string read_source_file(const std::string& path) {
  std::ifstream in(std::filesystem::path(DDP_SOURCE_DIR) / path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace ddp_test::pages
