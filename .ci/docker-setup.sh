#!/usr/bin/env bash
# What lockguard's docker tests (`pytest -m docker`) need: a Docker engine that answers, with
# the base image they build on (.ci/test-base.sh). The tests never start or install anything:
# run this once, as root (`sudo bash .ci/docker-setup.sh`); .ci/run does.
#
# Idempotent: leaves an engine that already answers on DOCKER_HOST (default: the standard
# socket) alone. Otherwise installs docker.io with apt (root), starts dockerd in the background
# on that socket, and waits until it answers. Then makes the base image if it is missing.
#   LOCKGUARD_DOCKERD_LOG   where dockerd's log goes (default /tmp/lockguard-dockerd.log)
#   LOCKGUARD_DOCKER_WAIT   seconds to wait for the engine (default 60)
set -euo pipefail

sock_url="${DOCKER_HOST:-unix:///var/run/docker.sock}"
case "$sock_url" in
  unix://*) sock="${sock_url#unix://}" ;;
  *) echo "docker-setup: DOCKER_HOST=$sock_url is not a unix socket; start that engine yourself" >&2
     exit 1 ;;
esac
log="${LOCKGUARD_DOCKERD_LOG:-/tmp/lockguard-dockerd.log}"
wait_s="${LOCKGUARD_DOCKER_WAIT:-60}"

answers() {
  # The CLI may be missing before apt ran; curl on the socket works without it.
  if command -v docker >/dev/null 2>&1; then
    DOCKER_HOST="$sock_url" docker version --format '{{.Server.Version}}' >/dev/null 2>&1
  else
    curl -sf --unix-socket "$sock" http://localhost/_ping >/dev/null 2>&1
  fi
}

base_image() {
  DOCKER_HOST="$sock_url" bash "$(dirname "$0")/test-base.sh"
}

if answers; then
  echo "docker-setup: engine already answers on $sock_url"
  base_image
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "docker-setup: no engine on $sock_url and not root: cannot install or start dockerd" >&2
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "docker-setup: installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

# A dockerd left over from an earlier run that no longer answers: leave its pid file alone
# only if the process is alive (it may still be starting).
pidfile=/var/run/docker.pid
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "docker-setup: dockerd (pid $(cat "$pidfile")) is running; waiting for it"
else
  rm -f "$pidfile"
  mkdir -p "$(dirname "$sock")"
  echo "docker-setup: starting dockerd on $sock_url (log: $log)"
  # setsid + nohup: the engine outlives this script and the shell that called it.
  setsid nohup dockerd --host "$sock_url" --pidfile "$pidfile" >"$log" 2>&1 < /dev/null &
fi

for _ in $(seq 1 "$wait_s"); do
  if answers; then
    echo "docker-setup: engine answers on $sock_url"
    base_image
    exit 0
  fi
  sleep 1
done
echo "docker-setup: dockerd did not answer on $sock_url within ${wait_s} s; last log lines:" >&2
tail -n 20 "$log" >&2 || true
exit 1
