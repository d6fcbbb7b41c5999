#!/usr/bin/env bash
# The base image lockguard's docker tests build on (tests/conftest.py: TEST_BASE): Debian
# bookworm with python3.11 and venv, made by debootstrap and imported into the engine, because
# no registry is reachable to pull one from. Idempotent: does nothing when the engine has it.
#
# Needs a running engine (.ci/docker-setup.sh runs this after starting one) and root, for apt
# (debootstrap) and for debootstrap itself. About 1-2 minutes.
set -euo pipefail

image="lockguard-test/python:3.11-bookworm"

if ! command -v docker >/dev/null 2>&1; then
  echo "test-base: no docker command (apt-get install docker.io; .ci/docker-setup.sh does)" >&2
  exit 1
fi

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "test-base: $image is on the engine"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "test-base: $image is missing and making it needs root (debootstrap)" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "test-base: installing debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

tmp=$(mktemp -d /tmp/lockguard-debootstrap-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "test-base: debootstrapping bookworm into $tmp (1-2 min)"
if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
     bookworm "$tmp/root" >"$tmp/log" 2>&1; then
  echo "test-base: debootstrap failed; last lines:" >&2
  tail -n 20 "$tmp/log" >&2
  exit 1
fi
# The packages' archives and lists: nothing in an image needs them.
find "$tmp/root/var/cache/apt/archives" "$tmp/root/var/lib/apt/lists" -maxdepth 1 -type f -delete
tar -C "$tmp/root" -c . | docker import \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV LANG=C.UTF-8" - "$image" >/dev/null
echo "test-base: $image imported"
