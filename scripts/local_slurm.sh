#!/usr/bin/env bash
# A throw-away Slurm on this machine, for chapter 06 and its tests: Debian's slurmctld and slurmd
# 22.05 with munge, two emulated nodes (node1, node2) on one host, everything on 127.0.0.1.
#
# Each slurmd runs in its own UTS and mount namespace: inside a job `hostname` says node1 or node2
# and a private /etc/hosts makes both names resolve to 127.0.0.1, so the first host of
# SLURM_JOB_NODELIST is an address the ranks can reach, as on a real cluster. The host's own
# hostname and /etc/hosts are not touched. Needs root (slurmd starts jobs as their user) and
# `unshare` (namespaces); says so and exits 3 when either is missing, which the tests read as
# "skip".
#
# With DDP_SLURM_LINK=RATE (e.g. 100mbit) the nodes are hosts: each slurmd also gets its own
# network namespace, with an address (node1 10.0.1.1, node2 10.0.1.2) on a bridge where the
# controller is 10.0.1.254 (slurmctl), each link shaped to RATE with tbf, as 02_spawn --link does
# (Note [Nodes as hosts] in common/hosts/simulated_hosts.cpp). A job's ranks then talk across the links.
# The bridge is the only thing in the host's network; `down` removes it.
#
# Usage (as root):
#   scripts/local_slurm.sh up       install packages if missing, start munged, slurmctld, 2 slurmd
#   eval "$(scripts/local_slurm.sh env)"   point sbatch/srun/squeue/scontrol at it (SLURM_CONF)
#   scripts/local_slurm.sh status   daemons and sinfo
#   scripts/local_slurm.sh down     cancel all jobs, stop the daemons by PID (TERM, then KILL)
# Settings: DDP_SLURM_DIR (default /tmp/ddp-slurm), DDP_SLURM_CPUS per node (default 4),
#           DDP_SLURM_LINK (default: none, all on 127.0.0.1).
set -euo pipefail
dir=${DDP_SLURM_DIR:-/tmp/ddp-slurm}
cpus=${DDP_SLURM_CPUS:-4}
nodes=2
conf=$dir/etc/slurm.conf
link=${DDP_SLURM_LINK:-}
# The bridge's name: one per Slurm folder, so that two local Slurms do not share one.
bridge=ddpsl$(echo "$dir" | cksum | cut -c1-6)
sock=$dir/munge/munge.socket
export SLURM_CONF=$conf

say() { echo "[local_slurm] $*" >&2; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Ports: the controller and each slurmd need a fixed port in slurm.conf. Pick ones that are free
# now, from a range away from the trainers' (15000-24999 from job ids) and torchrun's 29500.
free_port() {
  python3 - "$1" <<'EOF'
import socket, sys
base = int(sys.argv[1])
for p in range(base, base + 400):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); s.close(); print(p); break
    except OSError:
        s.close()
EOF
}

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
    command -v munged >/dev/null && return 0
  say "installing slurmctld slurmd slurm-client munge"
  # Keep the packages' own services from starting (there is no systemd here anyway).
  local policy_added=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy_added=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
  [ "$policy_added" = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

write_config() {
  mkdir -p "$dir"/{etc,state,log,run,spool,munge,key}
  # munged refuses a socket folder others cannot enter; the key folder must be private.
  chmod 0755 "$dir" "$dir/munge"
  chmod 0700 "$dir/key"
  rm -rf "${dir:?}"/state/* "${dir:?}"/spool/*  # a fresh controller, no jobs of an earlier session
  [ -s "$dir/key/munge.key" ] || dd if=/dev/urandom of="$dir/key/munge.key" bs=1024 count=1 status=none
  chmod 0600 "$dir/key/munge.key"
  local ctld_port node_port mem_mb
  ctld_port=$(free_port 16817)
  node_port=$(free_port $((ctld_port + 1)))
  [ "$(free_port $((node_port + 1)))" = $((node_port + 1)) ] || node_port=$(free_port $((node_port + 10)))
  mem_mb=$(( $(awk '/^MemTotal:/{print $2}' /proc/meminfo) / 1024 / nodes ))
  if [ -n "$link" ]; then
    { echo "127.0.0.1 localhost"; echo "10.0.1.254 slurmctl"; for i in $(seq 1 $nodes); do echo "10.0.1.$i node$i"; done; } > "$dir/etc/hosts"
  else
    { grep -v -E '(^|[[:space:]])node[0-9]+([[:space:]]|$)' /etc/hosts || true; echo "127.0.0.1 node1 node2"; } > "$dir/etc/hosts"
  fi
  local ctld_host=localhost node_lines comm_params=CommunicationParameters=NoInAddrAny
  node_lines="NodeName=node[1-$nodes] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$node_port-$((node_port + nodes - 1)) CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"
  if [ -n "$link" ]; then  # each node at its own address (and in its own network: one port will do)
    ctld_host="slurmctl(10.0.1.254)"
    # srun on the host listens for its tasks' I/O on every address: bound to its host name's
    # address alone (NoInAddrAny), it is not the bridge's, which the nodes reach it by.
    comm_params=""
    node_lines=$(for i in $(seq 1 $nodes); do
      echo "NodeName=node$i NodeHostname=node$i NodeAddr=10.0.1.$i Port=$node_port CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"; done)
  fi
  cat > "$conf" <<EOF
# Written by scripts/local_slurm.sh: two emulated nodes on one host, for chapter 06's tests.
ClusterName=ddpcourse
SlurmctldHost=$ctld_host
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$sock,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
# No systemd, no cgroups here.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Schedule every 2 s (default 60 s): a requeued job starts again ~10 s after its requeue.
SchedulerParameters=bf_interval=1,sched_interval=2
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
# A fresh controller would count job ids from 1 again, and a job would find (and resume from) the
# checkpoints of an earlier session's job of the same id: start from a number taken from the clock.
FirstJobId=$(( $(date +%s) % 60000000 + 1000 ))
InactiveLimit=0
MinJobAge=600
KillWait=5
Waittime=0
$comm_params
# Declare more CPUs than the machine has cores (2 nodes x $cpus on 2 cores).
SlurmdParameters=config_overrides
$node_lines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

# DDP_SLURM_LINK's refusals, before any daemon starts.
check_link() {
  [[ $link =~ ^[0-9]+(\.[0-9]+)?[kmgKMG]bit$ ]] || { say "DDP_SLURM_LINK=$link: give a rate such as 100mbit or 1gbit"; exit 2; }
  command -v ip >/dev/null && command -v tc >/dev/null || { say "DDP_SLURM_LINK needs ip and tc (iproute2)"; exit 3; }
  ip link del "$bridge" 2>/dev/null || true  # one left by a killed run of this folder
  # One subnet for all linked Slurms: a second bridge with it would take the first one's replies.
  if other=$(ip -o addr show to 10.0.1.254/32 | awk '{print $2}') && [ -n "$other" ]; then
    say "10.0.1.254 is already on $other: another linked local Slurm is up (its 'down' removes it)"; exit 3
  fi
}

# DDP_SLURM_LINK: the bridge with the controller's address, then each slurmd in namespaces of its
# own (network too), wired to the bridge by a veth pair before it starts.
start_linked() {
  local i pid tbf burst
  # tbf as 02_spawn --link sets it (common/hosts/simulated_hosts.cpp): the rate, a burst of one GSO
  # packet (64 KiB) or 1 ms at the rate, whichever is more, and 50 ms of queue.
  burst=$(awk -v r="$link" 'BEGIN { u = tolower(substr(r, length(r) - 3, 1))
    b = (r + 0) * (u == "k" ? 1e3 : u == "m" ? 1e6 : 1e9) / 8 / 1000; printf "%d", (b > 65536 ? b : 65536) }')
  tbf="root tbf rate $link burst $burst latency 50ms"
  ip link add "$bridge" type bridge
  ip addr add 10.0.1.254/24 dev "$bridge"
  ip link set "$bridge" up
  # The controller answers to the name slurmctl (its own UTS namespace), on the bridge's address.
  unshare --uts sh -c "hostname slurmctl && exec slurmctld -f '$conf'"
  for i in $(seq 1 $nodes); do
    rm -f "$dir/run/wired-$i"
    unshare --net --uts --mount --propagation private sh -c \
      "for _ in \$(seq 200); do [ -e '$dir/run/wired-$i' ] && break; sleep 0.05; done;
       [ -e '$dir/run/wired-$i' ] || { echo 'node$i: not wired to the bridge within 10 s' >&2; exit 1; }
       mount --bind '$dir/etc/hosts' /etc/hosts && hostname node$i && exec slurmd -f '$conf' -N node$i" &
    pid=$!
    for _ in $(seq 1 100); do [ "$(readlink /proc/$pid/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break; sleep 0.05; done
    ip link add "${bridge}p$i" type veth peer name eth0 netns "$pid"
    ip link set "${bridge}p$i" master "$bridge" up
    tc qdisc add dev "${bridge}p$i" $tbf
    nsenter -t "$pid" -n sh -ec "ip link set lo up; ip addr add 10.0.1.$i/24 dev eth0; ip link set eth0 up; tc qdisc add dev eth0 $tbf"
    touch "$dir/run/wired-$i"
  done
}

up() {
  if [ "$(id -u)" != 0 ]; then say "not root: a local Slurm needs root (slurmd starts jobs as their user)"; exit 3; fi
  if ! command -v unshare >/dev/null || ! unshare --uts --mount --propagation private true 2>/dev/null; then
    say "namespaces unavailable ('unshare --uts --mount' is not permitted): node names could not resolve inside jobs"
    exit 3
  fi
  if alive "$dir/run/slurmctld.pid"; then say "already running ($conf)"; return 0; fi
  local t0=$SECONDS i
  install_packages
  [ -z "$link" ] || check_link
  write_config
  munged --key-file="$dir/key/munge.key" --socket="$sock" --pid-file="$dir/munge/munged.pid" \
         --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
  if [ -n "$link" ]; then
    start_linked
  else
    slurmctld -f "$conf"
    for i in $(seq 1 $nodes); do
      unshare --uts --mount --propagation private sh -c \
        "mount --bind '$dir/etc/hosts' /etc/hosts && hostname node$i && exec slurmd -f '$conf' -N node$i"
    done
  fi
  # Ready when every node is idle; at most 60 s.
  for i in $(seq 1 300); do
    [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" -ge $nodes ] && break
    if [ "$i" = 300 ]; then
      sinfo -N >&2 || true; tail -n 20 "$dir"/log/*.log >&2 || true
      say "nodes not idle after 60 s"; down; exit 1
    fi
    sleep 0.2
  done
  say "up in $((SECONDS - t0)) s: $nodes nodes x $cpus CPUs, SLURM_CONF=$conf"
}

stop_pid() {  # TERM, up to 15 s, then KILL
  local f=$1 pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$f"
}

down() {
  local ids i f
  if alive "$dir/run/slurmctld.pid"; then
    # Jobs run under slurmstepd, which outlives slurmd: cancel them first.
    ids=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${ids// /}" ]; then
      # shellcheck disable=SC2086
      scancel $ids || true
      for i in $(seq 1 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
    fi
  fi
  for f in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid"; do stop_pid "$f" & done
  wait
  stop_pid "$dir/munge/munged.pid"
  # The nodes' namespaces went with their last process; the bridge is the host's to remove.
  ip link del "$bridge" 2>/dev/null || true
  say "down"
}

case "${1:-}" in
  up) up ;;
  env) echo "export SLURM_CONF=$conf" ;;
  status)
    for f in "$dir"/munge/munged.pid "$dir"/run/*.pid; do
      [ -f "$f" ] && echo "$(basename "$f" .pid): pid $(cat "$f") $(alive "$f" && echo running || echo dead)"
    done
    alive "$dir/run/slurmctld.pid" && { sinfo -N; squeue; } ;;
  down) down ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
