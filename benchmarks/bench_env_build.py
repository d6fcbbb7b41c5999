"""What building an environment costs: lockguard's builds beside a bare `uv pip install`.

    python benchmarks/bench_env_build.py [--repeat 3] [--lock PATH ...] [--skip-pip]
                                         [--skip-copy] [--out FILE]

In one run, side by side, for each lock (default: the tests' torch lock and a numpy lock):

- bare uv: `uv venv --python PY DIR` then `uv pip install --python DIR/bin/python
  --only-binary :all: INDEXES --require-hashes -r LOCK`, the same interpreter and the same
  work as lockguard's build: INDEXES are pip's index options as lockguard passes them
  (pip_config_as_uv_args), so both resolve against the same indexes and find-links, and
  UV_LINK_MODE=hardlink for both;
- lockguard uv: `VenvBackend(installer="uv").prepare(lock, ...)`, as a check builds (the lock
  admitted, uv venv, uv pip install with wheels only and pip's index options, then the
  manifest and the ready marker);
- lockguard uv, copy: the same with UV_LINK_MODE=copy (what hardlinking from the cache saves);
- lockguard pip: `VenvBackend(installer="pip").prepare(lock, ...)`.

Every build is cold for the environment (a fresh lockguard cache: nothing to reuse) and is
measured twice over: with a cold wheel cache (a fresh, empty UV_CACHE_DIR / PIP_CACHE_DIR:
every wheel is fetched, from wherever the lock and pip's configuration point) and a warm one
(the same wheel cache the previous build of that lock filled: what a second lock sharing wheels,
or a CI run with lockguard's cache restored, pays). The runs are interleaved (each repeat
starting with the next tool) and repeated; medians are reported, with the ratio of each to
bare uv in the same wheel-cache state.

Then two environments built as one check builds them (pipeline.Environments.prepare_all), in
parallel and sequentially (build_workers forced to 1), warm wheel cache, cold env cache.
Writes benchmarks/results/env_build.json and prints the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH_LOCK = REPO / "tests" / "data" / "torch-2.13.0.txt"
NUMPY_LOCK = REPO / "tests" / "data" / "numpy-2.0.2.txt"
NUMPY_OLD = REPO / "tests" / "data" / "numpy-1.26.4.txt"
RESULTS = REPO / "benchmarks" / "results"


def shown(path: Path) -> str:
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


class Scratch:
    """Fresh directories under one temporary root, removed at the end."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lockguard-bench-build-",
                                          dir=os.environ.get("BENCH_TMP")))
        self.n = 0

    def new(self, name: str) -> Path:
        self.n += 1
        path = self.root / f"{self.n:03d}-{name}"
        path.mkdir()
        return path


def with_env(changes: dict[str, str]):
    """Set environment variables for the duration of a with-block."""
    import contextlib

    @contextlib.contextmanager
    def block():
        before = {k: os.environ.get(k) for k in changes}
        os.environ.update(changes)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return block()


@functools.cache
def bare_uv_indexes(lock: Path) -> list[str]:
    """pip's index options as lockguard's uv build passes them, read once before timing."""
    from lockguard.locks.parser import parse_lock
    from lockguard.installers import pip_config_as_uv_args

    parsed = parse_lock(lock)
    return pip_config_as_uv_args(constraints=not parsed.has_hashes,
                                 index_url=not parsed.options.index_url)


def bare_uv(uv: str, lock: Path, where: Path, caches: dict[str, str],
            compile_bytecode: bool = False) -> float:
    env = {**os.environ, "UV_CACHE_DIR": caches["UV_CACHE_DIR"], "UV_LINK_MODE": "hardlink"}
    indexes = bare_uv_indexes(lock)
    start = time.perf_counter()
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(where / "venv")],
                   env=env, check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(where / "venv" / "bin" / "python"),
                    "--only-binary", ":all:", *indexes, "--require-hashes", "-r", str(lock),
                    *(["--compile-bytecode"] if compile_bytecode else [])],
                   env=env, check=True)
    return time.perf_counter() - start


PIP_CONFIG_MEMO: Path | None = None  # lockguard's memo of pip's configuration, read once


def first_pip_config_read(where: Path) -> float:
    """Seconds lockguard takes to read pip's configuration into an empty cache (once per
    cache: later builds reuse the memo while pip's files and PIP_* variables are unchanged)."""
    global PIP_CONFIG_MEMO
    from lockguard import installers

    installers._pip_config.cache_clear()  # its memo, read again from the fresh cache
    with with_env({"LOCKGUARD_CACHE": str(where)}):
        start = time.perf_counter()
        installers.pip_config()
        elapsed = time.perf_counter() - start
    PIP_CONFIG_MEMO = where / "tools" / "pip-config.json"
    return elapsed


def fresh_lockguard_cache(where: Path) -> Path:
    """An empty lockguard cache but for the memo of pip's configuration."""
    from lockguard import installers

    installers._pip_config.cache_clear()  # its memo, read again from the fresh cache
    cache = where / "lockguard"
    if PIP_CONFIG_MEMO is not None and PIP_CONFIG_MEMO.is_file():
        (cache / "tools").mkdir(parents=True)
        shutil.copy(PIP_CONFIG_MEMO, cache / "tools" / PIP_CONFIG_MEMO.name)
    return cache


def lockguard_build(lock: Path, installer: str, where: Path, caches: dict[str, str]) -> float:
    from lockguard.envs.venv import VenvBackend
    from lockguard.locks.parser import parse_lock
    from lockguard.progress import QUIET

    # Only the measured installer's cache variable: a PIP_* variable lockguard did not see
    # before is a change to pip's configuration, and would make every uv build ask pip again.
    own = {k: v for k, v in caches.items() if k.startswith("UV_" if installer == "uv" else "PIP_")}
    with with_env({"LOCKGUARD_CACHE": str(fresh_lockguard_cache(where)), **own}):
        start = time.perf_counter()
        VenvBackend(installer=installer).prepare(parse_lock(lock), "torch", "cpu", QUIET)
        return time.perf_counter() - start


def two_envs(locks: list[Path], parallel: bool, where: Path, caches: dict[str, str]) -> float:
    from lockguard.config import Config
    from lockguard.flows import pipeline
    from lockguard.locks.parser import parse_lock
    from lockguard.locks.ref import LockRef
    from lockguard.settings import Settings

    refs = [LockRef(path=p, lock=parse_lock(p)) for p in locks]
    wanted = [(ref, "numpy", "cpu") for ref in refs]
    real = pipeline.build_workers
    if not parallel:
        pipeline.build_workers = lambda n: 1
    try:
        with with_env({"LOCKGUARD_CACHE": str(fresh_lockguard_cache(where)),
                       "UV_CACHE_DIR": caches["UV_CACHE_DIR"]}):
            start = time.perf_counter()
            envs = pipeline.Environments(pipeline.run_backend(Settings.resolve(Config())))
            envs.expect(wanted)
            envs.prepare_all(wanted)
            return time.perf_counter() - start
    finally:
        pipeline.build_workers = real


def wheel_caches(base: Path) -> dict[str, str]:
    return {"UV_CACHE_DIR": str(base / "uv"), "PIP_CACHE_DIR": str(base / "pip")}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lock", type=Path, action="append")
    parser.add_argument("--skip-pip", action="store_true", help="leave out the pip builds")
    parser.add_argument("--skip-copy", action="store_true",
                        help="leave out the UV_LINK_MODE=copy builds")
    parser.add_argument("--out", type=Path, default=RESULTS / "env_build.json")
    args = parser.parse_args()
    locks = args.lock or [TORCH_LOCK, NUMPY_LOCK]

    sys.path.insert(0, str(REPO))
    from lockguard.installers import find_uv

    uv = find_uv()
    if uv is None:
        raise SystemExit("uv not found (pip install -e .)")
    version = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.strip()
    os.environ.pop("UV_LINK_MODE", None)
    scratch = Scratch()
    load_before = list(os.getloadavg())
    tools = {
        "bare_uv": lambda lock, where, caches: bare_uv(uv, lock, where, caches),
        "lockguard_uv": lambda lock, where, caches: lockguard_build(lock, "uv", where, caches),
    }
    if not args.skip_copy:
        tools["lockguard_uv_copy"] = lambda lock, where, caches: lockguard_build(
            lock, "uv", where, {**caches, "UV_LINK_MODE": "copy"})
    if not args.skip_pip:
        tools["lockguard_pip"] = lambda lock, where, caches: lockguard_build(lock, "pip", where,
                                                                             caches)
    per_lock = {}
    try:
        pip_config_s = first_pip_config_read(scratch.new("pip-config"))
        with with_env({"LOCKGUARD_CACHE": str(PIP_CONFIG_MEMO.parent.parent)}):
            for lock in locks:
                bare_uv_indexes(lock)
        for lock in locks:
            times: dict[str, dict[str, list[float]]] = {t: {"cold": [], "warm": []}
                                                        for t in tools}
            names = list(tools)
            for r in range(args.repeat):
                # Each repeat starts with another tool: none always runs first (the page cache
                # the first build of a repeat fills, the others find).
                for name in names[r % len(names):] + names[:r % len(names)]:
                    build = tools[name]
                    caches = wheel_caches(scratch.new(f"{name}-wheels"))
                    for state in ("cold", "warm"):  # the warm build reuses the cold one's cache
                        where = scratch.new(name)
                        times[name][state].append(build(lock, where, caches))
                        shutil.rmtree(where)
                        print(f"{shown(lock)}: {name} ({state} wheel cache): "
                              f"{times[name][state][-1]:.2f} s", file=sys.stderr)
                    shutil.rmtree(caches["UV_CACHE_DIR"], ignore_errors=True)
                    shutil.rmtree(caches["PIP_CACHE_DIR"], ignore_errors=True)
            entry = {}
            for state in ("cold", "warm"):
                base = median(times["bare_uv"][state])
                entry[f"{state}_wheel_cache"] = {
                    name: {"median_s": median(t[state]), "runs_s": [round(x, 2) for x in t[state]],
                           "vs_bare_uv": round(median(t[state]) / base, 2)}
                    for name, t in times.items()}
            per_lock[shown(lock)] = entry

        pairs = [[NUMPY_OLD, NUMPY_LOCK], [TORCH_LOCK, NUMPY_OLD]]
        parallel = {}
        for pair in pairs:
            caches = wheel_caches(scratch.new("pair-wheels"))
            two_envs(pair, False, scratch.new("fill"), caches)  # fills the wheel cache
            runs: dict[str, list[float]] = {"sequential": [], "parallel": []}
            for _ in range(args.repeat):
                for mode in ("sequential", "parallel"):
                    where = scratch.new(mode)
                    runs[mode].append(two_envs(pair, mode == "parallel", where, caches))
                    shutil.rmtree(where)
            parallel[" + ".join(shown(p) for p in pair)] = {
                mode: median(t) for mode, t in runs.items()} | {
                "speedup": round(median(runs["sequential"]) / median(runs["parallel"]), 2)}
    finally:
        shutil.rmtree(scratch.root, ignore_errors=True)

    from lockguard.flows.pipeline import build_workers

    result = {
        "uv": version,
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "build_workers_for_2": build_workers(2),
        "repeat": args.repeat,
        "note": "each build into a fresh lockguard cache (holding only the memo of pip's "
                "configuration, read once per cache: pip_config_first_read_s); cold wheel "
                "cache = empty UV_CACHE_DIR/PIP_CACHE_DIR, warm = the cache the cold build of "
                "the same tool filled; bare uv gets lockguard's interpreter, --only-binary "
                ":all:, pip's index options (bare_uv_indexes) and UV_LINK_MODE=hardlink",
        "bare_uv_indexes": {shown(lock): bare_uv_indexes(lock) for lock in locks},
        "load_average_before_after": [load_before, list(os.getloadavg())],
        "pip_config_first_read_s": round(pip_config_s, 2),
        "builds": per_lock,
        "two_envs_warm_wheel_cache": parallel,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
