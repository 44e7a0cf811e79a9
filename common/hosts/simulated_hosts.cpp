// provides: SimulatedHosts (simulated_hosts.h): the namespaces, the bridge and the shaped links, made and removed.
#include "common/hosts/simulated_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>
#include <stdexcept>

#include "common/launch/command.h"
#include "common/basics/errors.h"

namespace ddp {

// Note [Nodes as hosts]
// ~~~~~~~~~~~~~~~~~~~~~
// Simulated nodes that share 127.0.0.1 talk at gigabytes per second: communication never costs
// what it costs on a cluster, and a MASTER_ADDR on another host, Gloo choosing an interface,
// a store across a link are never exercised. With --link each node becomes a host:
//
//   node0 (10.0.0.1)  node1 (10.0.0.2)  ...      one network namespace each: own interfaces,
//        eth0              eth0                   own ports, own host name and /etc/hosts
//         |  tbf RATE       |  tbf RATE           the link, shaped in both directions
//        p0 ---- br0 ----- p1                     a bridge (the switch) in a namespace of its own
//
// Ranks of one node share its namespace and talk over its loopback, unshaped, as ranks of one
// machine share memory. MASTER_ADDR is node 0's address; Gloo binds the address the node's
// name resolves to (createDefaultDevice), as on a cluster whose /etc/hosts or DNS knows it.
//
// Nothing is left behind, also when the launcher is killed with SIGKILL: every namespace is
// anonymous, held by a small process that dies with the launcher (PR_SET_PDEATHSIG), and the
// kernel removes a namespace, with its links and its bridge, when the last process in it is gone.
// The host's own network (`ip link`, `ip netns`) is never touched.
//
// Only bandwidth can be set: this kernel has tbf but not netem (no added latency or loss).

double parse_link_rate(const std::string& text) {
  static const std::regex form(R"(([0-9]+(\.[0-9]+)?)\s*([kKmMgG])bit(/s)?)");
  std::smatch m;
  if (!std::regex_match(text, m, form)) {
    throw UsageError("--link '" + text + "': give a rate such as 100mbit, 1gbit or 500kbit");
  }
  const double unit = std::string("kK").find(m[3].str()[0]) != std::string::npos   ? 1e3
                      : std::string("mM").find(m[3].str()[0]) != std::string::npos ? 1e6
                                                                                    : 1e9;
  const double rate = std::stod(m[1]) * unit;
  // Below ~1 Mbit/s a training step takes minutes; above 10 Gbit/s tbf cannot hold the rate.
  if (rate < 1e6 || rate > 1e10) throw UsageError("--link '" + text + "': choose a rate from 1mbit to 10gbit");
  return rate;
}

std::string describe_rate(double bits_per_s) {
  char s[32];
  if (bits_per_s >= 1e9) std::snprintf(s, sizeof(s), "%g Gbit/s", bits_per_s / 1e9);
  else std::snprintf(s, sizeof(s), "%g Mbit/s", bits_per_s / 1e6);
  return s;
}

namespace {

// A process that only holds namespaces. After fork: system calls only, no allocation.
[[noreturn]] void hold(pid_t parent, int ready_fd, int flags, const char* hosts_file, const char* host_name) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher gone (also SIGKILL): gone too, and the namespaces with it
  if (::getppid() != parent) ::_exit(1);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) ::signal(s, SIG_IGN);  // a Ctrl-C is for the workers
  int err = 0;
  if (::unshare(flags) != 0) err = errno;
  if (!err && hosts_file) {
    // A private copy of the mounts, so that this node's /etc/hosts is seen by its processes only.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(hosts_file, "/etc/hosts", nullptr, MS_BIND, nullptr) != 0 ||
        ::sethostname(host_name, std::strlen(host_name)) != 0) {
      err = errno;
    }
  }
  (void)!::write(ready_fd, &err, sizeof(err));
  ::close(ready_fd);
  if (err) ::_exit(1);
  while (true) ::pause();
}

// Runs `script` with sh inside the network namespace of `pid` (nsenter, from util-linux).
void run_in(pid_t pid, const std::string& script, const std::string& what) {
  const CommandResult r = run_command({"nsenter", "-t", std::to_string(pid), "-n", "sh", "-ec", script}, 20);
  if (!r.started) throw UsageError("--link needs nsenter (util-linux) on PATH");
  if (r.exit_code != 0) {
    throw UsageError("--link: could not set up " + what + " (" + (r.timed_out ? "timed out" : "exit " + std::to_string(r.exit_code)) +
                     "): " + r.output + "(needs `ip` and `tc` from iproute2, run as root)");
  }
}

int open_ns(pid_t pid, const char* kind) {
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/" + kind;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

SimulatedHosts::SimulatedHosts(int nodes, double bits_per_s) : bits_per_s_(bits_per_s) {
  if (::geteuid() != 0) {
    throw UsageError("--link needs root: it creates network namespaces and shapes their links (run as root, or leave --link out for 127.0.0.1)");
  }
  char cwd[4096];
  cwd_ = ::getcwd(cwd, sizeof(cwd)) ? cwd : "/";
  home_net_fd_ = open_ns(::getpid(), "net");

  // The hosts file every node sees: all names, so that each resolves its own and the others'.
  char hosts_path[] = "/tmp/ddp_hosts_XXXXXX";
  const int hosts_fd = ::mkstemp(hosts_path);
  if (hosts_fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  std::string hosts = "127.0.0.1 localhost\n";
  for (int k = 0; k < nodes; ++k) hosts += address(k) + " " + name(k) + "\n";
  (void)!::write(hosts_fd, hosts.data(), hosts.size());
  ::close(hosts_fd);
  ::chmod(hosts_path, 0644);

  std::vector<std::string> names;
  for (int k = 0; k < nodes; ++k) names.push_back(name(k));
  auto start_holder = [&](int flags, const char* host_name) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::close(fds[0]);
      hold(parent, fds[1], flags, host_name ? hosts_path : nullptr, host_name);
    }
    ::close(fds[1]);
    int err = -1;
    const bool told = ::read(fds[0], &err, sizeof(err)) == sizeof(err);
    ::close(fds[0]);
    if (!told || err != 0) {
      ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
      throw UsageError(std::string("--link: could not create a network namespace: ") + (told ? std::strerror(err) : "the helper died") +
                       " (needs root and a kernel that allows namespaces here)");
    }
    return pid;
  };
  try {
    switch_ = start_holder(CLONE_NEWNET, nullptr);
    for (int k = 0; k < nodes; ++k) holders_.push_back(start_holder(CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWNS, names[k].c_str()));
    ::unlink(hosts_path);  // the nodes' bind mounts keep it

    // tbf: the rate, a burst of at least one GSO packet (64 KiB) or 1 ms at the rate, and a queue
    // of 50 ms before it drops.
    const double bytes_per_s = bits_per_s / 8;
    const long burst = std::max(65536L, std::lround(bytes_per_s / 1000));
    const std::string tbf = " root tbf rate " + std::to_string(std::llround(bits_per_s)) + "bit burst " + std::to_string(burst) + " latency 50ms";
    run_in(switch_, "ip link add br0 type bridge; ip link set br0 up", "the bridge");
    for (int k = 0; k < nodes; ++k) {
      const std::string port = "p" + std::to_string(k);
      run_in(switch_,
             "ip link add " + port + " type veth peer name eth0 netns " + std::to_string(holders_[k]) + "; ip link set " + port +
                 " master br0; ip link set " + port + " up; tc qdisc add dev " + port + tbf,
             "the link of " + name(k));
      run_in(holders_[k],
             "ip link set lo up; ip addr add " + address(k) + "/24 dev eth0; ip link set eth0 up; tc qdisc add dev eth0" + tbf,
             name(k) + "'s address");
      net_fd_.push_back(open_ns(holders_[k], "net"));
      uts_fd_.push_back(open_ns(holders_[k], "uts"));
      mnt_fd_.push_back(open_ns(holders_[k], "mnt"));
    }
  } catch (...) {
    ::unlink(hosts_path);
    release();
    throw;
  }
}

SimulatedHosts::~SimulatedHosts() { release(); }

void SimulatedHosts::release() {
  for (auto* fds : {&net_fd_, &uts_fd_, &mnt_fd_}) {
    for (int fd : *fds) ::close(fd);
    fds->clear();
  }
  if (home_net_fd_ >= 0) ::close(home_net_fd_), home_net_fd_ = -1;
  for (pid_t pid : holders_) ::kill(pid, SIGKILL);
  if (switch_ > 0) ::kill(switch_, SIGKILL);
  for (pid_t pid : holders_) ::waitpid(pid, nullptr, 0);
  if (switch_ > 0) ::waitpid(switch_, nullptr, 0);
  holders_.clear(), switch_ = -1;
}

bool SimulatedHosts::enter(int node) const {
  // The mount namespace last: entering it moves the working folder to its root; go back to ours.
  return ::setns(net_fd_[node], CLONE_NEWNET) == 0 && ::setns(uts_fd_[node], CLONE_NEWUTS) == 0 &&
         ::setns(mnt_fd_[node], CLONE_NEWNS) == 0 && ::chdir(cwd_.c_str()) == 0;
}

std::vector<std::string> SimulatedHosts::enter_command(int node) const {
  return {"nsenter", "-t", std::to_string(holders_[node]), "-n", "-u", "-m", "--wd=" + cwd_, "--"};
}

void SimulatedHosts::in_network_of(int node, const std::function<void()>& f) const {
  if (::setns(net_fd_[node], CLONE_NEWNET) != 0) throw std::runtime_error(std::string("setns: ") + std::strerror(errno));
  try {
    f();
  } catch (...) {
    ::setns(home_net_fd_, CLONE_NEWNET);
    throw;
  }
  ::setns(home_net_fd_, CLONE_NEWNET);
}

}  // namespace ddp
