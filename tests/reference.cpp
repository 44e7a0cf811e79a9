// provides: the Python references run for the parity tests, by the reference server when one
// answers (reference.h).
#include "reference.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>

namespace ddp_test {

const std::string kReferenceSocket = std::string(DDP_BIN_DIR) + "/reference.sock";

// Note [One import of torch for the parity cases]
// Importing torch takes 1 s of the clock with Debian's 1.13 and 3.3 s with PyPI's 2.11, and each
// parity case ran the reference as a new Python: 39 imports a build. ctest's fixture
// PythonReference.Start (tests/CMakeLists.txt) starts tests/reference_server.py, which imports
// torch once and serves each case from a child it forks (the way the reference forks its ranks),
// on a socket in the build folder. A case asks it when it runs, else (no server: a test run
// outside ctest, or the server gone) runs the reference itself; the output and the exit code
// are the same either way, and the case says which served it. The tests that compare with a
// reference and run under the fixture are listed in tests/CMakeLists.txt (_served).
std::optional<ProcResult> ask_reference_server(const std::string& script, const std::vector<std::string>& args,
                                               double deadline_s, const std::map<std::string, std::string>& extra) {
  const std::string& path = kReferenceSocket;
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path) || ::access(path.c_str(), F_OK) != 0) return std::nullopt;
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  // This process's variables: the server refuses a case whose load-time ones (the kernels' and
  // threads', its LOAD_TIME) differ from its own.
  nlohmann::json env = nlohmann::json::object();
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  const std::string request = nlohmann::json{{"script", script}, {"argv", args}, {"env", env}}.dump() + "\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return std::nullopt;
  }
  ProcResult r;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (char buf[65536];;) {
    pollfd p{fd, POLLIN, 0};
    const int left_ms = static_cast<int>((deadline_s - elapsed()) * 1000);
    if (left_ms <= 0 || ::poll(&p, 1, left_ms) != 1) {
      r.timed_out = true;
      break;
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);  // a case that hung is left to the reference's own 40 s limit
  r.seconds = elapsed();
  static const std::regex verdict("\n\\[reference exit (-?[0-9]+)\\]\n$");
  std::smatch m;
  if (std::regex_search(r.output, m, verdict)) {
    r.exit_code = std::stoi(m[1]);
    r.output.erase(static_cast<size_t>(m.position(0)));
  } else if (!r.timed_out && r.output.find("Timeout (0:00:") == std::string::npos) {
    // Refused (another environment), or the server went away mid-case: run it here.
    std::cout << "the reference server gave no verdict" << (r.output.empty() ? "" : ": " + r.output) << "; the case runs it itself\n";
    return std::nullopt;
  }
  r.output = "[served by tests/reference_server.py]\n" + r.output;
  return r;
}

// The trainer's reference hung, printing nothing, twice in 2 CI runs when its ranks were
// forkserver children, and once in 6 full runs since they are forked (torch 2.11, the bf16
// reference), never by hand. A hung rank prints its stack at 38 s; at 40 s the harness dumps its
// own and exits; it is then run once more, saying so: a test fails on a hang only if the
// reference hangs twice in a row.
ProcResult run_reference(const ProcSpec& py, bool served, double deadline_s) {
  auto once = [&] {
    if (served && py.env.empty()) {  // the server has the tests' environment: a case that sets its own runs apart
      const std::string script = py.argv[1].substr(py.argv[1].rfind('/') + 1);
      if (auto r = ask_reference_server(script, std::vector<std::string>(py.argv.begin() + 2, py.argv.end()), deadline_s)) return *r;
    }
    return run_one(py, deadline_s);
  };
  ProcResult r = once();
  if (r.timed_out || r.output.find("Timeout (0:00:") != std::string::npos) {
    std::cout << "the Python reference did not finish (its harness, not the C++ run): once more; it said:\n" << r.output << "\n";
    r = once();
  }
  return r;
}

}  // namespace ddp_test
