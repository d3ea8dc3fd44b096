#!/usr/bin/env bash
# pg.sh — a private PostgreSQL instance for the bookstore, owned by this project.
#
# Usage:
#   pg.sh start  DIR [--port P] [--owner-pid PID] [--max-connections N] [--durable]
#   pg.sh stop   DIR
#   pg.sh status DIR
#   pg.sh url    DIR
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
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $# -ge 2 ]] || usage
cmd=$1
dir=$2
shift 2
port=54329
owner_pid=""
max_conn=300
durable=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --owner-pid) owner_pid=${2:?--owner-pid needs a value}; shift 2 ;;
    --max-connections) max_conn=${2:?--max-connections needs a value}; shift 2 ;;
    --durable) durable=1; shift ;;
    *) die "unknown option '$1'" ;;
  esac
done
[[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "--port must be 1..65535, got '$port'"
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
    opts=(-c "listen_addresses=127.0.0.1" -c "port=$port" -c "unix_socket_directories=$dir"
      -c "max_connections=$max_conn" -c "shared_buffers=256MB" -c "work_mem=8MB"
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
