// provides: the error file of a failed worker, in torchrun's JSON layout.
#include "common/error_file.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

namespace ddp {
namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out;
}

// The JSON string value that follows `"key": "` at or after `from`; unescapes \" \\ \n.
std::optional<std::string> string_after(const std::string& text, const std::string& key, size_t from = 0) {
  const std::string head = "\"" + key + "\": \"";
  size_t p = text.find(head, from);
  if (p == std::string::npos) return std::nullopt;
  std::string out;
  for (p += head.size(); p < text.size() && text[p] != '"'; ++p) {
    if (text[p] == '\\' && p + 1 < text.size()) {
      ++p;
      out += text[p] == 'n' ? '\n' : text[p];
    } else {
      out += text[p];
    }
  }
  return out;
}

}  // namespace

double monotonic_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void write_error_file(const std::string& message) {
  const char* path = std::getenv(kErrorFileVar);
  if (path == nullptr || *path == '\0' || ::access(path, F_OK) == 0) return;
  const std::string tmp = std::string(path) + ".tmp";
  {
    std::ofstream out(tmp);
    // torchrun shows py_callstack as the failure's "traceback": a C++ program has none, so the
    // message goes there too.
    out << "{\"message\": {\"message\": \"" << json_escape(message) << "\", \"extraInfo\": {\"py_callstack\": \""
        << json_escape(message) << "\", "
        << "\"timestamp\": \"" << std::time(nullptr) << "\", \"monotonic_s\": \"" << std::to_string(monotonic_seconds())
        << "\"}}}\n";
  }
  std::rename(tmp.c_str(), path);
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t inner = text.find("{\"message\": ");
  auto msg = string_after(text, "message", inner == std::string::npos ? 0 : inner + 1);
  if (!msg) return std::nullopt;
  ErrorRecord r{*msg, 0};
  if (auto t = string_after(text, "monotonic_s")) r.monotonic_s = std::atof(t->c_str());
  return r;
}

}  // namespace ddp
