#!/usr/bin/env bash
# pg.sh — a private PostgreSQL instance for the bookstore, owned by this project.
#
# Usage:
#   pg.sh start  DIR [--port P] [--owner-pid PID] [--max-connections N] [--durable]
#                    [--shared-buffers SIZE] [--work-mem SIZE] [--memory-cgroup NAME]
#   pg.sh stop   DIR
#   pg.sh status DIR
#   pg.sh url    DIR
#   pg.sh memory-limit DIR MB     (needs --memory-cgroup at start; 0 = no limit)
#   pg.sh read-iops-limit DIR N   (needs --memory-cgroup at start; 0 = no limit)
#
# Everything lives under DIR: the cluster (DIR/data), its unix socket (DIR),
# its log (DIR/postgres.log) and the connection URL (DIR/url). Nothing global is
# touched: no systemd unit, no /etc/postgresql cluster, no /var/run socket. The
# server listens on 127.0.0.1:P (default 54329) and on a unix socket in DIR; the
# only role, `bookstore`, is a superuser with trust authentication, and the
# database `bookstore` is created at first start. `stop` shuts the server down
# (fast mode) and leaves DIR in place; delete DIR to remove everything.
#
# initdb refuses to run as root, so when invoked as root the server runs as the
# `postgres` system user (from the Debian package) and DIR is chowned to it.
#
# --owner-pid PID starts a watchdog that stops the server (and removes DIR) as
# soon as PID exits — tests use it so that a crashed or killed test run cannot
# leave a postgres behind.
#
# --memory-cgroup NAME (root only) starts the server inside a new cgroup-v1
# memory group /sys/fs/cgroup/memory/NAME (which must not exist; its path is
# kept in DIR/cgroup), so that `memory-limit` can cap what PostgreSQL may use:
# shared buffers, every backend's private memory and the page cache of its
# files. With no swap, anonymous memory cannot be reclaimed, so the limit
# squeezes the page cache first (re-reads from disk) and, if the backends'
# own memory exceeds it, the cgroup's OOM killer ends a backend (PostgreSQL
# then restarts all sessions). The server also joins a blkio group of the same
# name (path in DIR/cgroup-blkio), so that `read-iops-limit` can cap its reads
# from the disk holding DIR, e.g. at what a disk of the paper's time did (a few
# hundred random reads/s) when the machine's own disk is much faster. `stop`
# (and the watchdog) removes both groups.
#
# By default the instance is tuned for benchmarking on a small machine: the
# database fits in shared_buffers, and fsync/synchronous_commit are off (the
# data is regenerated, never precious; the paper's database was also
# memory-resident). --durable restores the PostgreSQL defaults for those.
set -euo pipefail

PG_BIN=${PG_BIN:-}
if [[ -z "$PG_BIN" ]]; then
  for v in 17 16 15; do
    if [[ -x /usr/lib/postgresql/$v/bin/initdb ]]; then PG_BIN=/usr/lib/postgresql/$v/bin; break; fi
  done
fi

die() { echo "pg.sh: $*" >&2; exit 1; }
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $# -ge 2 ]] || usage
cmd=$1
dir=$2
shift 2
mb=""
if [[ $cmd == memory-limit || $cmd == read-iops-limit ]]; then
  [[ $# -ge 1 ]] || die "usage: pg.sh $cmd DIR N"
  mb=$1
  shift
fi
port=54329
owner_pid=""
max_conn=300
durable=0
shared_buffers=256MB
work_mem=8MB
memcg_name=""
MEMCG_ROOT=${MEMCG_ROOT:-/sys/fs/cgroup/memory}
BLKIO_ROOT=${BLKIO_ROOT:-/sys/fs/cgroup/blkio}
while [[ $# -gt 0 ]]; do
  case $1 in
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --owner-pid) owner_pid=${2:?--owner-pid needs a value}; shift 2 ;;
    --max-connections) max_conn=${2:?--max-connections needs a value}; shift 2 ;;
    --durable) durable=1; shift ;;
    --shared-buffers) shared_buffers=${2:?--shared-buffers needs a value}; shift 2 ;;
    --work-mem) work_mem=${2:?--work-mem needs a value}; shift 2 ;;
    --memory-cgroup) memcg_name=${2:?--memory-cgroup needs a value}; shift 2 ;;
    *) die "unknown option '$1'" ;;
  esac
done
[[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "--port must be 1..65535, got '$port'"
size_re='^[0-9]+(kB|MB|GB)$'
[[ "$shared_buffers" =~ $size_re ]] || die "--shared-buffers must be like 64MB (kB, MB or GB), got '$shared_buffers'"
[[ "$work_mem" =~ $size_re ]] || die "--work-mem must be like 4MB (kB, MB or GB), got '$work_mem'"
if [[ -n "$memcg_name" ]]; then
  [[ "$memcg_name" =~ ^[A-Za-z0-9._-]+$ ]] || die "--memory-cgroup NAME may hold only letters, digits, '.', '_' and '-', got '$memcg_name'"
  [[ $(id -u) == 0 ]] || die "--memory-cgroup needs root (it creates a group under $MEMCG_ROOT)"
  [[ -w "$MEMCG_ROOT/cgroup.procs" ]] || die "--memory-cgroup: the cgroup-v1 memory controller is not mounted at $MEMCG_ROOT"
  [[ -w "$BLKIO_ROOT/cgroup.procs" ]] || die "--memory-cgroup: the cgroup-v1 blkio controller is not mounted at $BLKIO_ROOT"
fi
[[ "$max_conn" =~ ^[0-9]+$ ]] && (( max_conn >= 5 )) || die "--max-connections must be an integer >= 5, got '$max_conn'"

[[ -n "$PG_BIN" && -x "$PG_BIN/initdb" && -x "$PG_BIN/pg_ctl" ]] ||
  die "PostgreSQL server binaries not found (looked in /usr/lib/postgresql/{17,16,15}/bin; set PG_BIN). Install the Debian package 'postgresql'."

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
data=$dir/data
log=$dir/postgres.log
(( ${#dir} < 90 )) || die "DIR path too long for a unix socket (${#dir} chars; keep it under 90): $dir"

# Run a command as the server's user: ourselves, or `postgres` when we are root.
as_owner() {
  if [[ $(id -u) == 0 ]]; then
    # runuser keeps the environment small and needs no password.
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# The memory and blkio groups of the instance in DIR (empty when it has none).
memcg() { cat "$dir/cgroup" 2>/dev/null || true; }
blkcg() { cat "$dir/cgroup-blkio" 2>/dev/null || true; }

# Moves whatever is left in group $1 to the root group $2 and removes it. The
# kernel refuses rmdir while a task is inside, and tasks may still be exiting
# right after pg_ctl stop, hence the retries.
group_remove() {
  local g=$1 root=$2
  [[ -n "$g" && -d "$g" ]] || return 0
  for _ in $(seq 50); do
    while read -r pid; do echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true; done <"$g/cgroup.procs"
    rmdir "$g" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "pg.sh: could not remove group $g" >&2
  return 1
}

memcg_remove() {
  local rc=0
  group_remove "$(memcg)" "$MEMCG_ROOT" || rc=1
  group_remove "$(blkcg)" "$BLKIO_ROOT" || rc=1
  (( rc == 0 )) && rm -f "$dir/cgroup" "$dir/cgroup-blkio"
  return $rc
}

url() { echo "postgres://bookstore@127.0.0.1:$1/bookstore"; }

running() { [[ -f "$data/postmaster.pid" ]] && as_owner "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; }

case $cmd in
  start)
    if [[ $(id -u) == 0 ]]; then
      getent passwd postgres >/dev/null || die "running as root needs the 'postgres' system user (Debian package postgresql)"
      chown postgres: "$dir"
      chmod 0700 "$dir"
    fi
    if running; then
      echo "pg.sh: already running in $dir" >&2
      cat "$dir/url"
      exit 0
    fi
    if [[ ! -f "$data/PG_VERSION" ]]; then
      rm -rf "$data"
      as_owner "$PG_BIN/initdb" -D "$data" -U bookstore --auth=trust -E UTF8 --locale=C.UTF-8 \
        --no-instructions >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed (log above)"; }
    fi
    if [[ -n "$memcg_name" ]]; then
      g=$MEMCG_ROOT/$memcg_name
      [[ ! -e "$g" ]] || die "memory group $g already exists (another run?); choose a unique --memory-cgroup"
      b=$BLKIO_ROOT/$memcg_name
      [[ ! -e "$b" ]] || die "blkio group $b already exists (another run?); choose a unique --memory-cgroup"
      # Undo on failure from here until the server is up.
      trap 'memcg_remove' EXIT
      mkdir "$g" || die "could not create memory group $g"
      echo "$g" >"$dir/cgroup"
      mkdir "$b" || die "could not create blkio group $b"
      echo "$b" >"$dir/cgroup-blkio"
      # Join them: pg_ctl and the postmaster (and so every backend) inherit the groups.
      echo $$ >"$g/cgroup.procs"
      echo $$ >"$b/cgroup.procs"
    fi
    opts=(-c "listen_addresses=127.0.0.1" -c "port=$port" -c "unix_socket_directories=$dir"
      -c "max_connections=$max_conn" -c "shared_buffers=$shared_buffers" -c "work_mem=$work_mem"
      -c "log_min_messages=warning" -c "logging_collector=off")
    if (( ! durable )); then
      opts+=(-c "fsync=off" -c "synchronous_commit=off" -c "full_page_writes=off")
    fi
    if ! as_owner "$PG_BIN/pg_ctl" -D "$data" -l "$log" -w -t 60 -o "${opts[*]}" start >/dev/null; then
      tail -n 20 "$log" >&2 || true
      die "server did not start (is port $port in use? log: $log)"
    fi
    if ! as_owner "$PG_BIN/psql" -h "$dir" -p "$port" -U bookstore -d postgres -tAq \
      -c "SELECT 1 FROM pg_database WHERE datname = 'bookstore'" | grep -q 1; then
      as_owner "$PG_BIN/createdb" -h "$dir" -p "$port" -U bookstore bookstore
    fi
    if [[ -n "$memcg_name" ]]; then
      # Leave the groups: only PostgreSQL is charged to them, not this script or the watchdog.
      echo $$ >"$MEMCG_ROOT/cgroup.procs"
      echo $$ >"$BLKIO_ROOT/cgroup.procs"
      trap - EXIT
    fi
    url "$port" >"$dir/url.tmp" && mv "$dir/url.tmp" "$dir/url"
    if [[ -n "$owner_pid" ]]; then
      # Watchdog: detached from our stdio so callers reading our output are not held open.
      nohup bash -c '
        while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
        "$0" stop "$2" >/dev/null 2>&1 || true
        rm -rf "$2"
      ' "$0" "$owner_pid" "$dir" </dev/null >/dev/null 2>&1 &
    fi
    cat "$dir/url"
    ;;
  stop)
    if running; then
      as_owner "$PG_BIN/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null
      echo "pg.sh: stopped ($dir)" >&2
    else
      echo "pg.sh: not running ($dir)" >&2
    fi
    memcg_remove
    ;;
  memory-limit)
    g=$(memcg)
    [[ -n "$g" && -d "$g" ]] || die "no memory group for $dir (start it with --memory-cgroup NAME)"
    [[ "${mb:-}" =~ ^[0-9]+$ ]] || die "memory-limit needs MB as a non-negative integer, got '${mb:-}'"
    if (( mb == 0 )); then bytes=-1; else bytes=$((mb * 1024 * 1024)); fi
    # Lowering the limit below the current usage makes the kernel reclaim (page cache) first;
    # it fails with EBUSY when it cannot.
    echo "$bytes" >"$g/memory.limit_in_bytes" || die "could not set $g/memory.limit_in_bytes to $bytes (usage $(cat "$g/memory.usage_in_bytes") bytes cannot be reclaimed below it)"
    echo "pg.sh: memory limit of $g: $(cat "$g/memory.limit_in_bytes") bytes" >&2
    ;;
  read-iops-limit)
    b=$(blkcg)
    [[ -n "$b" && -d "$b" ]] || die "no blkio group for $dir (start it with --memory-cgroup NAME)"
    [[ "${mb:-}" =~ ^[0-9]+$ ]] || die "read-iops-limit needs reads/s as a non-negative integer, got '${mb:-}'"
    # The block device holding the data directory (its major:minor; a partition's reads are
    # throttled on the partition).
    devno=$(stat -c '%Hd:%Ld' "$data")
    echo "$devno $mb" >"$b/blkio.throttle.read_iops_device" || die "could not set $b/blkio.throttle.read_iops_device to '$devno $mb'"
    echo "pg.sh: read limit of $b: $(cat "$b/blkio.throttle.read_iops_device") reads/s" >&2
    ;;
  status)
    if running; then
      echo "running: $(cat "$dir/url" 2>/dev/null || echo '?') (data $data)"
    else
      echo "stopped ($dir)"
      exit 3
    fi
    ;;
  url)
    [[ -f "$dir/url" ]] || die "no instance in $dir (run: pg.sh start $dir)"
    cat "$dir/url"
    ;;
  *) usage ;;
esac
