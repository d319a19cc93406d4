#!/usr/bin/env bash
# A Docker engine for `make e2e`: the one DOCKER_HOST (or the default socket) names when it answers,
# else a private dockerd started here as root, stopped again by its own pid file and nothing else.
#
#   tools/e2e/engine.sh start DIR   prints the DOCKER_HOST to use (starts a daemon under DIR if needed)
#   tools/e2e/engine.sh stop DIR    stops the daemon this script started under DIR, if any
#
# The private daemon runs with --iptables=false --bridge=none, so containers use --network host.
set -euo pipefail
docker_cli=${DOCKER:-/usr/bin/docker}

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"

answers() { DOCKER_HOST=$1 "$docker_cli" info >/dev/null 2>&1; }

case $cmd in
start)
  if [ -z "${KIT_E2E_PRIVATE_ENGINE:-}" ]; then
    if [ -n "${DOCKER_HOST:-}" ] && answers "$DOCKER_HOST"; then echo "$DOCKER_HOST"; exit 0; fi
    if answers unix:///var/run/docker.sock; then echo unix:///var/run/docker.sock; exit 0; fi
  fi
  if [ -S "$sock" ] && answers "unix://$sock"; then echo "unix://$sock"; exit 0; fi
  if [ "$(id -u)" != 0 ]; then
    echo "engine.sh: no Docker engine answers and starting a private dockerd needs root; start one (sudo systemctl start docker) or set DOCKER_HOST" >&2
    exit 1
  fi
  command -v dockerd >/dev/null || { echo "engine.sh: dockerd is not installed (apt-get install docker.io)" >&2; exit 1; }
  mkdir -p "$dir/data" "$dir/exec"
  rm -f "$sock"
  dockerd --storage-driver overlay2 --iptables=false --bridge=none -H "unix://$sock" \
    --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$pidfile" >"$dir/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do
    if answers "unix://$sock"; then echo "unix://$sock"; exit 0; fi
    sleep 1
  done
  echo "engine.sh: dockerd did not answer within 60 s; see $dir/dockerd.log" >&2
  tail -5 "$dir/dockerd.log" >&2 || true
  exit 1
  ;;
stop)
  [ -f "$pidfile" ] || exit 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  rm -f "$pidfile"
  ;;
*) usage ;;
esac
