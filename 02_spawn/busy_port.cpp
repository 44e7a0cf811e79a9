// provides: refuse_busy_port(): 02_spawn's check of a --master-port before the forks.
#include "02_spawn/busy_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/basics/errors.h"
#include "common/launch/net.h"

namespace spawn {

// Note [A port given by hand]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without --master-port the launcher's store asks the OS for a free port (port 0), and two runs
// never clash. With --master-port P (or MASTER_PORT=P) the store must listen on P, and it is
// created after the forks (Fork first, step 2): had P been taken, every worker would already be
// running, wait for a port that never comes, and fail with "the launcher did not send the
// store's port", a table of consequences with the cause buried above it. So P is tried before
// anything is forked, as the store would listen: on every address ([::], which takes IPv4 too,
// else 0.0.0.0) with SO_REUSEADDR (a port whose last connections linger in TIME_WAIT is free for
// it, one that another process listens on is not). Refused with exit 2, like any plan that
// cannot run: the port is the user's choice, and the fix is theirs to make. Someone may still
// take P between this check and the store; then the store's own error says so, as before.
namespace {

// 0 when a socket of `family` could bind every address at `port` (and was closed), else errno.
int try_bind(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM, 0);
  if (fd < 0) return errno;
  const int yes = 1, no = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  int rc;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6, a.sin6_addr = in6addr_any, a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_ANY), a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

void refuse_busy_port(const ddp::RankInfo& base) {
  const int port = base.master_port.value;
  if (try_bind(AF_INET6, port) == 0) return;
  const int err = try_bind(AF_INET, port);
  if (err == 0) return;
  throw ddp::UsageError("port " + std::to_string(port) + " (" + base.master_port.source + ") cannot host the launcher's store: " +
                        std::strerror(err) + (err == EADDRINUSE ? " (another process listens on it)" : "") +
                        ". Leave --master-port and MASTER_PORT unset to let the OS pick a free port, or pick another one, e.g. " +
                        std::to_string(ddp::find_free_port()) + " (free right now)");
}

}  // namespace spawn
