// provides: the error file of a failed worker, in torchrun's JSON layout.
#include "common/launch/error_file.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

namespace ddp {

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
    // torchrun shows py_callstack as the failure's "traceback": a C++ program has none, so the
    // message goes there too. Its values are strings, timestamps included, as torchrun writes them.
    const nlohmann::json record = {{"message",
                                    {{"message", message},
                                     {"extraInfo",
                                      {{"py_callstack", message},
                                       {"timestamp", std::to_string(std::time(nullptr))},
                                       {"monotonic_s", std::to_string(monotonic_seconds())}}}}}};
    std::ofstream(tmp) << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  std::rename(tmp.c_str(), path);
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  // torchrun's layout; a Python worker's record (torch.distributed.elastic) has the same shape.
  const nlohmann::json* m = doc.is_object() && doc.contains("message") ? &doc["message"] : nullptr;
  if (!m || !m->is_object() || !m->contains("message") || !(*m)["message"].is_string()) return std::nullopt;
  ErrorRecord r{(*m)["message"].get<std::string>(), 0};
  const nlohmann::json extra = m->value("extraInfo", nlohmann::json::object());
  if (extra.is_object() && extra.contains("monotonic_s") && extra["monotonic_s"].is_string()) {
    r.monotonic_s = std::atof(extra["monotonic_s"].get<std::string>().c_str());
  }
  return r;
}

}  // namespace ddp
