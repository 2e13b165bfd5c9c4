#!/usr/bin/env bash
# Start, stop and restart a background process by name, for benchmark runs.
#
#   bg.sh start NAME -- COMMAND [ARGS...]   start COMMAND in the background (log: NAME.log)
#   bg.sh stop NAME                         SIGTERM, wait up to 60 s, then SIGKILL
#   bg.sh restart NAME                      stop, then start the same command again
#   bg.sh status NAME
#
# State lives in $OXBOW_LOADTEST_RUN (default /tmp/oxbow-loadtest-run): NAME.pid, NAME.cmd
# (the command, NUL-separated) and NAME.log. `restart` is what `oxbow-loadtest catchup
# --restart-cmd "loadtest/scripts/bg.sh restart oxbow"` uses to make data cold: a
# restarted broker has an empty memory tail and read cache. Only processes this script
# started are signalled, by their recorded pid.
set -euo pipefail

RUN_DIR="${OXBOW_LOADTEST_RUN:-/tmp/oxbow-loadtest-run}"
mkdir -p "$RUN_DIR"

usage() { sed -n '2,12p' "$0" >&2; exit 2; }

alive() { [[ -f "$RUN_DIR/$1.pid" ]] && kill -0 "$(cat "$RUN_DIR/$1.pid")" 2>/dev/null; }

start() {
  local name=$1; shift
  if alive "$name"; then echo "$name is already running (pid $(cat "$RUN_DIR/$name.pid"))" >&2; exit 1; fi
  printf '%s\0' "$@" > "$RUN_DIR/$name.cmd"
  # Descriptors beyond stdio are not passed on: a caller's lock (`flock LOCK bg.sh …`)
  # would otherwise be held by the server for as long as it runs.
  (
    for fd in $(ls /proc/$BASHPID/fd); do
      if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec nohup "$@" >>"$RUN_DIR/$name.log" 2>&1 </dev/null
  ) &
  echo $! > "$RUN_DIR/$name.pid"
  echo "$name started (pid $!, log $RUN_DIR/$name.log)" >&2
}

stop() {
  local name=$1
  if ! alive "$name"; then rm -f "$RUN_DIR/$name.pid"; return 0; fi
  local pid; pid=$(cat "$RUN_DIR/$name.pid")
  kill -TERM "$pid"
  for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$RUN_DIR/$name.pid"; echo "$name stopped" >&2; return 0; }
    sleep 0.1
  done
  echo "$name did not stop in 60 s; SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$RUN_DIR/$name.pid"
}

[[ $# -ge 2 ]] || usage
cmd=$1 name=$2; shift 2
case "$cmd" in
  start)
    [[ "${1:-}" == "--" ]] || usage; shift
    [[ $# -ge 1 ]] || usage
    start "$name" "$@" ;;
  stop) stop "$name" ;;
  restart)
    [[ -f "$RUN_DIR/$name.cmd" ]] || { echo "no recorded command for $name" >&2; exit 1; }
    mapfile -d '' argv < "$RUN_DIR/$name.cmd"
    stop "$name"
    start "$name" "${argv[@]}" ;;
  status)
    if alive "$name"; then echo "$name running (pid $(cat "$RUN_DIR/$name.pid"))"; else echo "$name stopped"; exit 1; fi ;;
  *) usage ;;
esac
