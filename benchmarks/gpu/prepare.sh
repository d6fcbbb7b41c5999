#!/usr/bin/env bash
# Get what benchmarks/gpu/run.sh needs before it goes to a GPU host that reaches no package index.
#
#   bash benchmarks/gpu/prepare.sh [PYTHON_VERSION]   # default 3.12, the GPU host's python3
#   bash benchmarks/gpu/prepare.sh --dry-run          # also the CPU venv for run.sh --dry-run
#
# Wheels: lockguard's own dependencies (pyproject's [project] dependencies, its `docker` extra
# for run.sh's docker phases, and build requirements, resolved for CPython PYTHON_VERSION on
# manylinux x86_64), never a framework, go to
# .whl/cpXY/ (ignored by git). run.sh installs lockguard from the working tree with
# `pip install --no-index --find-links .whl/cpXY`. The device tool carries at most 64 MiB of
# working tree, so the total is checked against LOCKGUARD_WHEELS_MAX_MIB (default 32).
#
# --dry-run: wheels for the interpreter of the dry-run venv, and that venv itself
# (LOCKGUARD_GPU_DRYRUN_VENV, default ~/.cache/lockguard-gpu-dryrun/venv, outside the repo): torch
# and jax at the versions this repo's own locks pin, installed with those locks' index options,
# plus whatever numpy they resolve to. It stands in for the GPU host's preinstalled stack.
set -euo pipefail
cd "$(dirname "$0")/../.."

dry_run=0
version=3.12
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run=1 ;;
        [0-9].[0-9]*) version="$arg" ;;
        *) echo "usage: $0 [PYTHON_VERSION] [--dry-run]" >&2; exit 2 ;;
    esac
done
host_python=${PYTHON_FOR_PIP:-python3}

pin_of() {  # pin_of LOCK NAME -> the version LOCK pins NAME to
    sed -n "s/^$2==\([^ ;]*\).*/\1/p" "$1" | head -n1
}

if [ "$dry_run" = 1 ]; then
    venv=${LOCKGUARD_GPU_DRYRUN_VENV:-$HOME/.cache/lockguard-gpu-dryrun/venv}
    torch_lock=tests/data/torch-2.13.0.txt
    jax_lock=tests/data/jax-0.10.2.txt
    torch_v=$(pin_of "$torch_lock" torch)
    jax_v=$(pin_of "$jax_lock" jax)
    jaxlib_v=$(pin_of "$jax_lock" jaxlib)
    # The locks' own index options (a local --find-links, a CPU index), so that pip finds the
    # same CPU builds the locks were made from.
    mapfile -t index_opts < <(grep -hoE '^--(find-links|index-url|extra-index-url)[ =][^ ]+' \
                              "$torch_lock" "$jax_lock" | tr ' ' '=' | sort -u)
    if ! "$venv/bin/python" -c 'import torch, jax, numpy' 2>/dev/null; then
        echo "building the dry-run venv $venv: torch==$torch_v jax==$jax_v jaxlib==$jaxlib_v"
        mkdir -p "$(dirname "$venv")"
        "$host_python" -m venv "$venv"
        "$venv/bin/pip" install -q "${index_opts[@]}" "torch==$torch_v" "jax==$jax_v" \
            "jaxlib==$jaxlib_v" numpy
    fi
    "$venv/bin/python" -c 'import torch, jax, numpy; print("dry-run venv:", torch.__version__,
                            "jax", jax.__version__, "numpy", numpy.__version__)'
    version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
fi

tag="cp${version/./}"
dest=".whl/$tag"
mapfile -t requirements < <("$host_python" - <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    data = tomllib.load(f)
for req in (data["project"]["dependencies"] + data["project"]["optional-dependencies"]["docker"]
            + data["build-system"]["requires"]):
    print(req)
EOF
)
# pip matches manylinux tags literally: name each glibc baseline a wheel may be built for.
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 \
         manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1; do
    platforms+=(--platform "${p}_x86_64")
done
tmp=$(mktemp -d .whl-download.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "downloading wheels for CPython $version into $dest: ${requirements[*]}"
"$host_python" -m pip download -q --only-binary=:all: --python-version "$version" \
    --implementation cp --abi "$tag" "${platforms[@]}" -d "$tmp" "${requirements[@]}"
rm -rf "$dest"
mkdir -p .whl
mv "$tmp" "$dest"
trap - EXIT

total=$(du -sb "$dest" | cut -f1)
limit_mib=${LOCKGUARD_WHEELS_MAX_MIB:-32}
count=$(find "$dest" -name '*.whl' | wc -l)
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "$dest: $count wheels, $(mib "$total") MiB"
# What the device tool sends: tracked and untracked-not-ignored files, plus the carried wheels.
tree=$( { git ls-files -z --cached --others --exclude-standard 2>/dev/null || true; } |
        xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
echo "working tree that travels with $dest carried: $(mib $((tree + total))) MiB (limit 64 MiB)"
if [ "$total" -gt $((limit_mib * 1048576)) ]; then
    echo "error: $dest is over ${limit_mib} MiB: the device tool carries at most 64 MiB" >&2
    exit 1
fi
