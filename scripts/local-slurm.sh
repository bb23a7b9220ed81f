#!/usr/bin/env bash
# A real one-node Slurm cluster on loopback, for scripts/test-slurm.sh and for trying slurm/ by hand.
# Debian 12 (slurm-wlm 22.05, munge 0.5), run as root, no systemd needed. Adapted from
# the team's reference script (docs/SCALING.md, "Testing on one machine").
#
#   scripts/local-slurm.sh start    install slurmctld/slurmd/slurm-client/munge if missing (apt-get),
#                                   start munged, slurmctld, slurmd; wait until the node is idle.
#                                   Idempotent: live daemons with the same configuration are reused;
#                                   a changed configuration (e.g. SLURM_LOCAL_CPUS) restarts them.
#                                   Prints `export SLURM_CONF=...` on stdout.
#   scripts/local-slurm.sh stop     cancel jobs, stop only the daemons this script started (pid files)
#   scripts/local-slurm.sh clean    stop, then remove state, spool, logs under $SLURM_LOCAL_BASE
#   scripts/local-slurm.sh status   daemons, scontrol ping, sinfo
#
# Clients need SLURM_CONF=$SLURM_LOCAL_BASE/etc/slurm.conf (also linked from /etc/slurm/slurm.conf
# when that path is free).
#
# Environment: SLURM_LOCAL_BASE (default /tmp/local-slurm); SLURM_LOCAL_CPUS (CPUs the node advertises;
# more than the real count is allowed, e.g. 4 on a 2-core machine so that 4-rank jobs can run);
# SLURM_LOCAL_MEM_MB (RealMemory; default 90% of what `slurmd -C` reports); SLURM_LOCAL_TIMEOUT
# (seconds to wait for readiness, default 120); SLURM_LOCAL_INSTALL (1 = apt-get install if missing,
# the default; 0 = fail instead).
set -euo pipefail

BASE=${SLURM_LOCAL_BASE:-/tmp/local-slurm}
CONF=$BASE/etc/slurm.conf
RUN=$BASE/run
LOG=$BASE/log
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-120}
export SLURM_CONF=$CONF

log() { printf '[local-slurm %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; dump_logs; exit 1; }
dump_logs() {
  for f in "$LOG"/slurmctld.log "$LOG"/slurmd.log /var/log/munge/munged.log; do
    [ -s "$f" ] && { echo "---- tail $f" >&2; tail -n 30 "$f" >&2; }
  done
  return 0
}

# running PID : process exists and is not a zombie (PID 1 here reaps orphans lazily)
running() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
# pid_alive FILE NAME-PREFIX : FILE holds a running pid whose comm starts with NAME
pid_alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  running "$pid" || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2"* ]]
}

# wait_for SECONDS CMD... : poll CMD every 0.25 s until it succeeds
wait_for() {
  local t=$1; shift
  local end=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.25
  done
}

install_pkgs() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
    command -v sbatch >/dev/null && command -v munged >/dev/null && return 0
  [ "${SLURM_LOCAL_INSTALL:-1}" = 1 ] || die "slurm/munge not installed"
  log "installing slurmctld slurmd slurm-client munge"
  export DEBIAN_FRONTEND=noninteractive
  local apt="apt-get -o DPkg::Lock::Timeout=600 -q -y"
  $apt install --no-install-recommends slurmctld slurmd slurm-client munge ||
    { $apt update && $apt install --no-install-recommends slurmctld slurmd slurm-client munge; }
}

munge_ok() { { timeout 10 munge -n </dev/null | timeout 10 unmunge; } >/dev/null 2>&1; }

start_munge() {
  if munge_ok; then log "munged already working; reusing it"; return 0; fi
  # key: Debian's postinst normally creates it; make one if absent
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null ||
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  # munged insists: key owned by the daemon user and not group/other readable,
  # dirs not writable by others.  /run is tmpfs -> /run/munge must be recreated.
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
  chmod 0700 /etc/munge /var/log/munge; chmod 0400 /etc/munge/munge.key
  chmod 0755 /run/munge; chmod 0711 /var/lib/munge
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid ||
    die "munged failed to start"
  wait_for 20 munge_ok || die "munge does not work"
  cp /run/munge/munged.pid "$RUN/munged.pid"   # marks munged as ours for 'stop'
  log "munged started (pid $(cat "$RUN/munged.pid"))"
}

# write_conf: the configuration for this machine (and SLURM_LOCAL_*) into $CONF.new
write_conf() {
  local host hw cpus sockets cores threads mem
  host=$(hostname -s)
  hw=$(slurmd -C | head -n1)     # NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 ...
  field() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<<"$hw"; }
  cpus=$(field CPUs); sockets=$(field SocketsPerBoard)
  cores=$(field CoresPerSocket); threads=$(field ThreadsPerCore)
  mem=${SLURM_LOCAL_MEM_MB:-$(( $(field RealMemory) * 9 / 10 ))}
  local nodehw="CPUs=$cpus Sockets=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads"
  local extra=""
  if [ -n "${SLURM_LOCAL_CPUS:-}" ] && [ "$SLURM_LOCAL_CPUS" != "$cpus" ]; then
    # advertise more (virtual) CPUs than exist so scripts asking -n 4 etc. can run
    nodehw="CPUs=$SLURM_LOCAL_CPUS Sockets=1 CoresPerSocket=$SLURM_LOCAL_CPUS ThreadsPerCore=1"
    extra="SlurmdParameters=config_overrides"
  fi
  mkdir -p "$BASE/etc"
  cat >"$CONF.new" <<EOF
# generated by local-slurm.sh
ClusterName=ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again after the credential lifetime (default 120 s): short here, so that the
# requeue test of scripts/test-slurm.sh does not wait two minutes.
AuthInfo=cred_expire=10
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=pmi2
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=600
EnforcePartLimits=ALL
KillWait=5
Waittime=0
$extra
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host $nodehw RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

# install_conf: make $CONF.new the configuration in force, linked from /etc/slurm when free
install_conf() {
  mv "$CONF.new" "$CONF"
  # let clients work without SLURM_CONF if the default path is free (or already ours)
  mkdir -p /etc/slurm
  if [ ! -e /etc/slurm/slurm.conf ] || [ -L /etc/slurm/slurm.conf ]; then
    ln -sfn "$CONF" /etc/slurm/slurm.conf
  fi
}

# wait until the node is usable; fail fast on INVAL (config vs hardware mismatch,
# e.g. RealMemory/CPUs larger than slurmd -C reports), RESUME a DOWN/DRAIN node once
wait_node() {
  local end=$(( $(date +%s) + TIMEOUT )) st resumed=0 i=0
  while :; do
    st=$(timeout 10 sinfo -h -N -o '%t|%E' 2>/dev/null | head -n1) || st=""
    case ${st%%|*} in
      idle|mix|alloc) return 0 ;;   # no trailing "*" (= not responding)
      inval*) die "node INVAL: ${st#*|}" ;;
      down*|drain*|drng*|fail*)
        if [ $resumed = 0 ] && [ $i -ge 20 ]; then
          log "node ${st%%|*} (${st#*|}); trying State=RESUME"
          scontrol update NodeName="$(hostname -s)" State=RESUME || true
          resumed=1
        fi ;;
    esac
    [ "$(date +%s)" -lt "$end" ] || die "node not usable after ${TIMEOUT}s: $st"
    i=$((i + 1)); sleep 0.25
  done
}

do_start() {
  [ "$(id -u)" = 0 ] || die "must run as root (slurmd needs root)"
  local t0; t0=$(date +%s.%N)
  install_pkgs
  # the short hostname must resolve: munge origin, slurmd/srun and MPICH hydra
  # (mpiexec --control-port <host>:port) all look it up; unresolvable => jobs hang
  if ! getent hosts "$(hostname -s)" >/dev/null; then
    log "hostname $(hostname -s) does not resolve; adding it to /etc/hosts"
    echo "127.0.0.1 $(hostname -s) $(hostname)  # added by local-slurm.sh" >>/etc/hosts
  fi
  mkdir -p "$BASE"/{etc,state,spool,log,run}
  chmod 0755 "$BASE" "$BASE/spool" "$BASE/state"
  start_munge
  write_conf   # into $CONF.new
  if pid_alive "$RUN/slurmctld.pid" slurmctld && pid_alive "$RUN/slurmd.pid" slurmd &&
    cmp -s "$CONF.new" "$CONF"; then
    log "slurmctld/slurmd already running with this configuration; reusing them"
    rm -f "$CONF.new"
  else
    if [ -f "$CONF" ] && ! cmp -s "$CONF.new" "$CONF"; then
      log "configuration changed ($CONF); restarting slurmctld/slurmd if running"
      kill_pidfile "$RUN/slurmd.pid" slurmd
      kill_pidfile "$RUN/slurmctld.pid" slurmctld
    fi
    install_conf
    if ! pid_alive "$RUN/slurmctld.pid" slurmctld; then
      slurmctld -f "$CONF" || die "slurmctld failed to start"
    fi
    wait_for 30 timeout 5 scontrol ping || die "slurmctld not answering"
    if ! pid_alive "$RUN/slurmd.pid" slurmd; then
      slurmd -f "$CONF" || die "slurmd failed to start"
    fi
  fi
  wait_for "$TIMEOUT" timeout 5 scontrol ping || die "slurmctld not UP"
  wait_node
  log "cluster ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') s"
  sinfo >&2
  echo "export SLURM_CONF=$CONF"
}

kill_pidfile() {  # kill_pidfile FILE NAME
  local f=$1 name=$2 pid
  if pid_alive "$f" "$name"; then
    pid=$(cat "$f")
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 120); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then log "$name pid $pid ignored TERM; KILL"; kill -KILL "$pid" || true; fi
  fi
  rm -f "$f"
}

do_stop() {
  if pid_alive "$RUN/slurmctld.pid" slurmctld; then
    # cancel leftover jobs so slurmstepd processes exit too
    timeout 10 scancel --quiet --user=root 2>/dev/null || true
    for _ in $(seq 1 40); do
      [ -z "$(timeout 5 squeue -h -t R,CG 2>/dev/null)" ] && break; sleep 0.25
    done
  fi
  kill_pidfile "$RUN/slurmd.pid" slurmd
  kill_pidfile "$RUN/slurmctld.pid" slurmctld
  if [ -s "$RUN/munged.pid" ]; then    # only if this script started it
    kill_pidfile "$RUN/munged.pid" munged
    rm -f /run/munge/munged.pid
  fi
  [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$CONF" ] &&
    rm -f /etc/slurm/slurm.conf
  log "stopped"
}

do_status() {
  for d in munged slurmctld slurmd; do
    if pid_alive "$RUN/$d.pid" "$d"; then echo "$d: running (pid $(cat "$RUN/$d.pid"))"
    else echo "$d: not running (from this script)"; fi
  done
  timeout 5 scontrol ping || true
  timeout 5 sinfo || true
}

case ${1:-} in
  start)  do_start ;;
  stop)   do_stop ;;
  clean)  do_stop; rm -rf "$BASE"/{state,spool,log,run} "$CONF"; log "cleaned $BASE" ;;
  status) do_status ;;
  -h|--help) sed -n '2,24p' "$0" ;;
  *) echo "local-slurm.sh: unknown command '${1:-}' (valid: start, stop, clean, status, --help)" >&2; exit 2 ;;
esac
