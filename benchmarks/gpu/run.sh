#!/usr/bin/env bash
# lockguard on a real GPU (issue 14), in one go: on a host whose python3 already holds torch, jax
# (with its CUDA plugin) and numpy, and which reaches no package index,
#   1. install lockguard from this working tree and the wheels prepare.sh put in .whl/cpXY/
#      (lockguard's own dependencies only; the frameworks are the host's), into a scratch
#      --target that only lockguard's own process sees (the harness drops PYTHONPATH);
#   2. `record` the torch and jax scenarios with --env local --device cuda into a scratch golden
#      tree, returned as golden.tar.gz (whatever layout record writes);
#   3. `check --rerun --repeat 3` against them: run-to-run (non)determinism per scenario;
#   4. the same check with the GPU hidden (CUDA_VISIBLE_DEVICES=): must exit 1 with
#      device_fallback for every torch and jax scenario;
#   5. time each scenario on the GPU (3 runs) and with --device cpu on the same host (2 runs):
#      import, first step (compilation included), steady step, and the per-step spread of
#      losses, grad norms and outputs across the GPU runs;
#   6. where the host has Docker with the NVIDIA runtime (or LOCKGUARD_GPU_DOCKER=1): the same
#      scenarios in the lock's own CUDA images (issue 25: torch 2.14.1 and jax[cuda13], their
#      nvidia-* wheels on a plain Python base, the driver from the host): `build` (the stack
#      proven before a GPU is seen), `record --env docker` on the GPU, and the check with the
#      GPU hidden, which must be device_fallback saying "no NVIDIA driver visible in the
#      container"; without Docker these phases are left out and said so;
#   7. write gpu.json (the shape of benchmarks/results/gpu.json) and print a compact summary.
# Each phase runs under a timeout cut from one overall budget, so the whole run ends in time
# (default 540 s) and a phase that runs out leaves the later ones their share or is skipped.
# Results go to $OUT (the device tool's folder; default .gpu-work/out): log.txt, record.json,
# check.json, fallback.json, golden.tar.gz, gpu.json, runs.tar.gz. Exit 0 when every assertion
# in gpu.json holds, 1 when one does not.
#
#   bash benchmarks/gpu/run.sh             # on the GPU host: see benchmarks/gpu/README.md
#   bash benchmarks/gpu/run.sh --dry-run   # on a CPU machine: --device cpu, 3 scenarios, 3
#                                          # steps, the venv prepare.sh --dry-run built
# Settings (environment): LOCKGUARD_GPU_PYTHON (interpreter holding the frameworks),
# LOCKGUARD_GPU_STEPS, LOCKGUARD_GPU_SCENARIOS (default "torch jax"), LOCKGUARD_GPU_BUDGET
# (seconds), LOCKGUARD_GPU_WORK (scratch folder, cleared), LOCKGUARD_GPU_WHEELS,
# LOCKGUARD_GPU_DRY_RUN=1 (same as --dry-run), LOCKGUARD_GPU_DOCKER (auto: the docker phases
# where `docker info` lists the nvidia runtime; 1: always, a dry run builds the images and
# checks the fallback only; 0: never). The docker phases build multi-GB images (minutes, a
# package index needed): give them budget, e.g. LOCKGUARD_GPU_BUDGET=2400. LOCKGUARD_BASE_IMAGE
# (lockguard's own) names a local base image where no registry is reachable.
set -uo pipefail  # no -e: a failed phase is recorded and the later phases still run

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
dry_run=${LOCKGUARD_GPU_DRY_RUN:-0}
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run=1 ;;
        *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
    esac
done
check_repeat=3
docker_mode=${LOCKGUARD_GPU_DOCKER:-auto}
if [ "$docker_mode" = auto ]; then
    docker_mode=0
    if [ "$dry_run" != 1 ] && command -v docker >/dev/null 2>&1 &&
        timeout 20 docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia; then
        docker_mode=1
    fi
fi
if [ "$dry_run" = 1 ]; then
    # The same phases on a small CPU machine: torch eager and compiled, jax jitted in bf16; a
    # few steps, fewer timing runs.
    device=cpu
    python=${LOCKGUARD_GPU_PYTHON:-$HOME/.cache/lockguard-gpu-dryrun/venv/bin/python}
    steps=${LOCKGUARD_GPU_STEPS-3}
    budget=${LOCKGUARD_GPU_BUDGET:-900}
    scenarios=${LOCKGUARD_GPU_SCENARIOS:-torch.mlp torch.mlp.compile jax.lm.bf16}
    accel_repeat=2
    cpu_repeat=1
else
    device=cuda
    python=${LOCKGUARD_GPU_PYTHON:-python3}
    steps=${LOCKGUARD_GPU_STEPS-}  # empty: each scenario's own steps, as goldens are recorded
    budget=${LOCKGUARD_GPU_BUDGET:-540}  # the H200 runs needed 453 s or so, graph break included
    scenarios=${LOCKGUARD_GPU_SCENARIOS:-torch jax}
    accel_repeat=3
    cpu_repeat=2
fi
read -r -a scenario_prefixes <<< "$scenarios"
work=${LOCKGUARD_GPU_WORK:-$repo/.gpu-work}
out=${OUT:-$work/out}
measure_jobs=4  # timing runs at once: fewer than lockguard's default, so they contend less
# The CPU side pins each run to one thread, so a host with many cores takes more of them at once
# (half its cores, 4 to 8): at 4, the 34 CPU runs of the first H200 run outlasted their 105 s.
cpu_jobs=$(( $(nproc) / 2 )); cpu_jobs=$(( cpu_jobs < 4 ? 4 : (cpu_jobs > 8 ? 8 : cpu_jobs) ))
run_timeout=$((budget * 40 / 100))  # per training run: lockguard kills a hung one (broken)
reserve=20  # seconds kept for the summary and the tarballs

# Everything this script prints also goes to $out/log.txt (the device tool returns the tail).
if [ -z "${_LOCKGUARD_GPU_LOGGED:-}" ]; then
    marker=.lockguard-gpu-work
    if [ -e "$work" ] && [ ! -e "$work/$marker" ]; then
        echo "error: $work exists and is not a scratch folder of this script; not clearing it" >&2
        exit 2
    fi
    rm -rf "$work"
    mkdir -p "$work" "$out"
    touch "$work/$marker"
    _LOCKGUARD_GPU_LOGGED=1 PYTHONUNBUFFERED=1 bash "${BASH_SOURCE[0]}" "$@" 2>&1 |
        tee "$out/log.txt"
    exit "${PIPESTATUS[0]}"
fi
# The settings above are this script's: lockguard refuses a LOCKGUARD_* variable it does not
# know, as it refuses an unknown config key.
unset "${!LOCKGUARD_GPU_@}"

t0=$SECONDS
site=$work/site
project=$work/project
runs=$work/runs
mkdir -p "$project" "$runs"

now() { date +%s.%N; }

reap() {  # kill harness processes a timed-out lockguard left behind (each leads its own group)
    local f pid
    for f in /proc/[0-9]*/cmdline; do
        if grep -qsaF -- "$site/lockguard/harness/run.py" "$f"; then
            pid=${f#/proc/}; pid=${pid%/cmdline}
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
        fi
    done
    if [ "$docker_mode" = 1 ]; then  # and the containers of docker runs (lockguard labels them)
        docker ps -q --filter label=lockguard.run=1 | xargs -r docker kill >/dev/null 2>&1
    fi
}

phase() {  # phase NAME SHARE MIN CMD...: CMD under a timeout of at most SHARE % of the budget
    local name=$1 cap=$(($2 * budget / 100)) min=$3
    shift 3
    local left=$((budget - (SECONDS - t0) - reserve))
    local limit=$((cap < left ? cap : left))
    if [ "$limit" -lt "$min" ]; then
        echo "-- $name: skipped, ${left}s of the ${budget}s budget left"
        printf '%s\t-\t0\tskipped: %ss of the budget left\n' "$name" "$left" >> "$work/phases.tsv"
        return 1
    fi
    echo "-- $name (at most ${limit}s): $*"
    local start rc note=""
    start=$(now)
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        note="timed out after ${limit}s"
        reap
    fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(awk -v a="$start" -v b="$(now)" \
        'BEGIN {printf "%.1f", b - a}')" "$note" >> "$work/phases.tsv"
    echo "-- $name: exit $rc${note:+ ($note)}"
    return "$rc"
}

echo "== lockguard GPU run: $([ "$dry_run" = 1 ] && echo 'DRY RUN, ')device $device," \
     "python $python, budget ${budget}s, out $out"
if [ "$dry_run" != 1 ]; then
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
        --format=csv,noheader > "$work/nvidia-smi.txt" 2>&1
    cat "$work/nvidia-smi.txt"
fi
"$python" "$here/gpurun.py" host --nvidia-smi "$work/nvidia-smi.txt" > "$work/host.json"

# 1. lockguard from the working tree (a copy, so that the build leaves no files in the tree)
tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
wheels=${LOCKGUARD_GPU_WHEELS:-$repo/.whl/$tag}
mkdir -p "$work/src"
# images/ too: the package's image templates (lockguard/envs/docker/templates) link to it.
cp -r "$repo/pyproject.toml" "$repo/README.md" "$repo/lockguard" "$repo/images" "$work/src/"
source_spec="$work/src"
[ "$docker_mode" = 1 ] && source_spec="$work/src[docker]"  # the docker SDK (prepare.sh has it)
phase install 25 20 "$python" -m pip install -q --no-index --find-links "$wheels" \
    --target "$site" --no-compile --no-warn-script-location --disable-pip-version-check \
    "$source_spec"
export PYTHONPATH=$site
# From here on lockguard runs in its project folder: `python -m` puts the working directory
# first on sys.path, and in the repo root that would be the source tree, not the installed copy.
cd "$project" || exit 2
if ! "$python" -c "import lockguard, sys; sys.exit(not lockguard.__file__.startswith('$site'))"
then
    echo "error: lockguard is not importable from $site (wheels: $wheels; run prepare.sh)" >&2
    printf 'install-check\t1\t0\tlockguard not importable from the target\n' >> "$work/phases.tsv"
fi
"$python" -m lockguard --version

# A project of its own: goldens land in a scratch tree, never in this repo's golden/. The lock
# pins only the host's numpy, so torch and jax run from the host interpreter (lock "local").
numpy_version=$("$python" -c 'import importlib.metadata as m; print(m.version("numpy"))')
printf 'numpy==%s\n' "$numpy_version" > "$project/host-numpy.txt"
cat > "$project/lockguard.toml" <<EOF
# written by benchmarks/gpu/run.sh
lock = "host-numpy.txt"
golden_dir = "golden"
timeout = $run_timeout
EOF
config=$project/lockguard.toml
scenario_args=()
for s in "${scenario_prefixes[@]}"; do scenario_args+=(--scenario "$s"); done
steps_args=()
[ -n "$steps" ] && steps_args=(--steps "$steps")
"$python" "$here/gpurun.py" select --config "$config" --device "$device" "${scenario_args[@]}" \
    > "$work/scenarios.txt"
echo "scenarios: $(tr '\n' ' ' < "$work/scenarios.txt")"
# The timing runs take exactly these (lockguard's runner has no plan to skip the others).
measure_ids=()
while read -r s; do [ -n "$s" ] && measure_ids+=(--scenario "$s"); done < "$work/scenarios.txt"
common=(--config "$config" --env local "${scenario_args[@]}" ${steps_args[@]+"${steps_args[@]}"})
cat > "$work/settings.json" <<EOF
{"dry_run": $([ "$dry_run" = 1 ] && echo true || echo false), "device": "$device",
 "steps": ${steps:-null}, "scenario_prefixes": "${scenario_prefixes[*]}", "budget_s": $budget,
 "check_repeat": $check_repeat, "accel_repeat": $accel_repeat, "cpu_repeat": $cpu_repeat,
 "measure_jobs": $measure_jobs, "cpu_jobs": $cpu_jobs, "run_timeout_s": $run_timeout, "python": "$python",
 "wheels": "$wheels"}
EOF

# 2-4. record, re-check three times, check with the GPU hidden
phase record 50 30 "$python" -m lockguard record "${common[@]}" --device "$device" \
    --format json -o "$out/record.json"
if [ -d "$project/golden" ]; then
    tar -czf "$out/golden.tar.gz" -C "$project/golden" .
    echo "goldens: $(cd "$project/golden" && find . -name '*.json' | sort | tr '\n' ' ')"
fi
phase check 40 30 "$python" -m lockguard check "${common[@]}" --device "$device" --rerun \
    --repeat "$check_repeat" --allow-new --format json -o "$out/check.json"
# cuda expected in both modes: in a dry run there is no GPU to hide, and no cuda golden (hence
# --allow-new), but the verdict must be device_fallback all the same.
phase fallback 30 30 env CUDA_VISIBLE_DEVICES= "$python" -m lockguard check "${common[@]}" \
    --device cuda --rerun --allow-new --format json -o "$out/fallback.json"

# 5. timings: the accelerator, then the CPU of the same host (never a measure without ids: it
# would take every bundled scenario)
if [ ${#measure_ids[@]} -gt 0 ]; then
    measure=("$python" "$here/gpurun.py" measure --config "$config" "${measure_ids[@]}"
             ${steps_args[@]+"${steps_args[@]}"} --out "$runs")
    phase measure-accel 30 30 "${measure[@]}" --jobs "$measure_jobs" --device "$device" \
        --label accel --repeat "$accel_repeat"
    phase measure-cpu 25 30 "${measure[@]}" --jobs "$cpu_jobs" --device cpu --label cpu \
        --repeat "$cpu_repeat"
else
    echo "-- measure: skipped, no scenario this host runs (scenarios.txt is empty)"
    printf 'measure\t-\t0\tskipped: no scenario\n' >> "$work/phases.tsv"
fi

# 5b. torch.compile's graph breaks on the GPU as on the CPU (after the timings, so as not to take
# their time): tests/test_compile.py's training of lg_testlayer 2.0, whose layer counts outliers
# by a data-dependent .item(), compiled once on the CPU and once on the GPU (the CPU again in a
# dry run).
if grep -q '^torch\.' "$work/scenarios.txt"; then
    gb=$work/graph-break
    mkdir -p "$gb"
    cp "$project/host-numpy.txt" "$gb/"
    "$python" "$here/gpurun.py" graph-break-project --dir "$gb" --timeout "$run_timeout"
    phase graph-break 15 30 "$python" -m lockguard record --config "$gb/lockguard.toml" \
        --env local --device "$device" --format json -o "$work/graph-break.json"
fi

# 6. the lock's own CUDA images, where Docker can give containers the GPU
docker_ids=()
if [ "$docker_mode" = 1 ]; then
    # The scenarios this host runs, less the compiled ones: torch.compile (inductor, Triton)
    # builds C at run time, and the images hold no compiler.
    while read -r s; do
        case "$s" in *.compile|"") ;; *) docker_ids+=(--scenario "$s") ;; esac
    done < "$work/scenarios.txt"
    # A project of their own: the test locks (tests/data/README.md: the torch one installs from
    # that machine kind's indexes and PyPI, the jax one from PyPI), a golden tree apart.
    dproject=$work/docker
    mkdir -p "$dproject"
    docker_locks=()
    grep -q '^torch\.' "$work/scenarios.txt" && docker_locks+=(torch-2.14.1-cuda.txt)
    grep -q '^jax\.' "$work/scenarios.txt" && docker_locks+=(jax-0.10.2-cuda13.txt)
fi
if [ "$docker_mode" = 1 ] && [ ${#docker_locks[@]} -gt 0 ] && [ ${#docker_ids[@]} -gt 0 ]; then
    for lock in "${docker_locks[@]}"; do cp "$repo/tests/data/$lock" "$dproject/"; done
    {
        echo "# written by benchmarks/gpu/run.sh"
        printf 'locks = [%s]\n' "$(printf '"%s", ' "${docker_locks[@]}" | sed 's/, $//')"
        echo 'env = "docker"'
        echo 'golden_dir = "golden"'
        echo "timeout = $run_timeout"
    } > "$dproject/lockguard.toml"
    echo "docker scenarios: ${docker_ids[*]}"
    dcommon=(--config "$dproject/lockguard.toml" "${docker_ids[@]}"
             ${steps_args[@]+"${steps_args[@]}"})
    if phase docker-build 45 60 "$python" -m lockguard build --config "$dproject/lockguard.toml" \
        --accelerator cuda; then
        if [ "$dry_run" != 1 ]; then
            phase docker-record 30 30 "$python" -m lockguard record "${dcommon[@]}" \
                --device cuda --format json -o "$out/docker-record.json"
        fi
        # No GPU asked for: the image's stack loads, the training runs on the CPU and every
        # verdict must say why (the container sees no NVIDIA driver).
        phase docker-fallback 25 30 env CUDA_VISIBLE_DEVICES= "$python" -m lockguard check \
            "${dcommon[@]}" --device cuda --rerun --allow-new --format json \
            -o "$out/docker-fallback.json"
    fi
elif [ "$docker_mode" = 1 ]; then
    echo "-- docker: no torch or jax scenario to run in the images"
    printf 'docker-build\t-\t0\tskipped: no torch or jax scenario\n' >> "$work/phases.tsv"
else
    echo "-- docker: left out (no Docker engine with the NVIDIA runtime here;" \
         "LOCKGUARD_GPU_DOCKER=1 forces it)"
fi

# 7. summary and what goes back
dry_flag=()
[ "$dry_run" = 1 ] && dry_flag=(--dry-run)
docker_flag=()
[ "$docker_mode" = 1 ] && docker_flag=(--docker)
"$python" "$here/gpurun.py" summarize --work "$work" --out "$out" --device "$device" \
    ${dry_flag[@]+"${dry_flag[@]}"} ${docker_flag[@]+"${docker_flag[@]}"}
rc=$?
[ "$rc" -le 1 ] || { echo "error: the summary failed (exit $rc)" >&2; rc=3; }
extra=()
[ -f "$work/graph-break.json" ] && extra=(graph-break.json)
[ -d "$work/graph-break" ] && extra+=(graph-break)
tar -czf "$out/runs.tar.gz" -C "$work" runs phases.tsv settings.json host.json scenarios.txt \
    project/lockguard.toml project/host-numpy.txt ${extra[@]+"${extra[@]}"}
echo "== done in $((SECONDS - t0))s (budget ${budget}s), exit $rc; in $out:"
find "$out" -maxdepth 1 -type f -printf '  %f  %s bytes\n' | sort
exit "$rc"
