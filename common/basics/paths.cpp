// provides: make_dirs() and the paths of this program and its neighbours.
#include "common/basics/paths.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/basics/errors.h"

namespace ddp {

void make_dirs(const std::string& dir) {
  // Each prefix ending before a '/' (not the leading one of an absolute path), then the whole.
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      throw UsageError("cannot create the folder " + part + ": " + std::strerror(errno));
    }
    if (at == std::string::npos) break;
  }
}

std::string this_program() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw std::runtime_error(std::string("cannot find this program: ") + std::strerror(errno));
  return std::string(self, n);
}

std::string program_beside(const std::string& name) {
  const std::string self = this_program();
  return self.substr(0, self.rfind('/') + 1) + name;
}

}  // namespace ddp
