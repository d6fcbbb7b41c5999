#!/usr/bin/env bash
# The base images lockguard's docker tests build on (tests/conftest.py: TEST_BASE and
# NEWEST_BASE), made by debootstrap and imported into the engine, because no registry is
# reachable to pull one from:
#   lockguard-test/python:3.11-bookworm   Debian 12, python3.11: what the docker tests build on
#   lockguard-test/python:3.13-trixie     Debian 13, python3.13: the newest CPython the
#                                         frameworks support (tests/test_python_versions.py)
# Idempotent: makes only the ones the engine lacks.
#
# Needs a running engine (.ci/docker-setup.sh runs this after starting one) and root, for apt
# (debootstrap) and for debootstrap itself. About 1-2 minutes a base (trixie: 33 s measured).
set -euo pipefail

# suite=image: the Debian release debootstrap installs, the name it is imported under.
bases=(
  "bookworm=lockguard-test/python:3.11-bookworm"
  "trixie=lockguard-test/python:3.13-trixie"
)

if ! command -v docker >/dev/null 2>&1; then
  echo "test-base: no docker command (apt-get install docker.io; .ci/docker-setup.sh does)" >&2
  exit 1
fi

# The debootstrap folder of the base being made, removed however the script ends.
tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT

make_base() {
  local suite=$1 image=$2
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "test-base: $image is on the engine"
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "test-base: $image is missing and making it needs root (debootstrap)" >&2
    return 1
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "test-base: installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  fi
  tmp=$(mktemp -d /tmp/lockguard-debootstrap-XXXXXX)
  echo "test-base: debootstrapping $suite into $tmp (1-2 min)"
  if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
       "$suite" "$tmp/root" >"$tmp/log" 2>&1; then
    echo "test-base: debootstrap of $suite failed; last lines:" >&2
    tail -n 20 "$tmp/log" >&2
    return 1
  fi
  # The packages' archives and lists: nothing in an image needs them.
  find "$tmp/root/var/cache/apt/archives" "$tmp/root/var/lib/apt/lists" -maxdepth 1 -type f -delete
  tar -C "$tmp/root" -c . | docker import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" - "$image" >/dev/null
  rm -rf "$tmp"
  tmp=""
  echo "test-base: $image imported"
}

for entry in "${bases[@]}"; do
  make_base "${entry%%=*}" "${entry#*=}"
done
