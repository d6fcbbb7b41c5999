"""Docker images: cold build time, image size and the cache-hit time, per framework (CPU images),
and the CUDA and TPU images built from real locks' own wheels (--accelerators).

    python benchmarks/bench_docker.py [--frameworks numpy,torch,jax,tensorflow] [--repeat 5]
                                      [--base IMAGE]
    python benchmarks/bench_docker.py --accelerators [torch-cuda,jax-cuda,jax-tpu] [--repeat 3]

Needs a Docker engine (bash .ci/docker-setup.sh) and a base image with python3 + venv: by
default the tests' lockguard-test/python:3.11-bookworm (made by tests/test_docker.py's fixture,
or by hand: see .ci/docker-setup.sh and tests/test_docker.py::_make_test_base).

Per framework, with the repository's real locks:
  download   the lock's wheels fetched on the host into a fresh wheelhouse (hashes checked)
  build      `build_image` with that wheelhouse warm and no image under the tag: the classic
             build, the install stage's removal and the conformance check. The empty-venv layer
             of the base stage is shared by every lock on a base, so it is built once, not per lock
  size       the image as the engine reports it, and what it adds over the base
  hit        `build_image` again: the tag exists and its conformance is recorded (median, in
             process; and once from a fresh Python process, imports included)
Writes benchmarks/results/docker.json and prints a table.

--accelerators, per image (tests/data's torch 2.14.1 CUDA lock, jax[cuda13], jax[tpu]), one at a
time, from a fresh cache (cold wheelhouse, no image under the tag; the base stage's empty-venv
layer is the engine's and shared):
  download   the lock's wheels into a fresh wheelhouse (hashes checked)
  build      `build_image` with that wheelhouse warm: build, install-stage removal, conformance
             and the accelerator-stack check (the CLI's "built in" figure; a rebuild after
             `docker image prune` costs this, the wheelhouse being kept)
  cold       download + build: the first build on a fresh machine
  stack      the stack check alone, again, on the built image (no GPU needed)
  warm       `build_image` again, in process (median): the tag and its record are reused
Writes benchmarks/results/docker-accelerators.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import lockguard.envs.docker as dk  # noqa: E402
from lockguard.envs.base import READY  # noqa: E402
from lockguard.locks.parser import parse_lock  # noqa: E402

DATA = REPO / "tests" / "data"
LOCKS = {
    "numpy": DATA / "docker-numpy.lock",
    "torch": REPO / "tests" / "data" / "torch-2.13.0.txt",
    "jax": DATA / "jax-0.10.2.txt",
    "tensorflow": DATA / "tf-2.21.0.txt",
}
RESULTS = REPO / "benchmarks" / "results"
ACCELERATOR_IMAGES = {
    "torch-cuda": (DATA / "torch-2.14.1-cuda.txt", "torch", "cuda"),
    "jax-cuda": (DATA / "jax-0.10.2-cuda13.txt", "jax", "cuda"),
    "jax-tpu": (DATA / "jax-0.10.2-tpu.txt", "jax", "tpu"),
}


def _remove(client, tag: str) -> None:
    try:
        client.images.remove(tag)
    except Exception:  # noqa: BLE001 - not there
        pass


def bench_accelerator(name: str, client, repeat: int) -> dict:
    from lockguard.envs.docker.stack import check_stack

    path, framework, accelerator = ACCELERATOR_IMAGES[name]
    lock = parse_lock(path)
    base = dk.resolve_base(client, accelerator)
    recipe = dk.recipe_for(framework, accelerator, lock, base)
    _remove(client, recipe.tag)
    target = dk.target_of(client, base)
    start = time.perf_counter()
    house = dk.wheelhouse_for(lock, target)
    download = time.perf_counter() - start
    info = json.loads((house / READY).read_text())
    cold = dk.build_image(lock, framework, accelerator, client=client)
    assert not cold.reused and cold.stack is not None
    start = time.perf_counter()
    stack = check_stack(client, cold.tag, lock, framework, recipe.module, accelerator, cold.log)
    stack_s = time.perf_counter() - start
    hits = []
    for _ in range(repeat):
        start = time.perf_counter()
        hit = dk.build_image(lock, framework, accelerator, client=client)
        hits.append(time.perf_counter() - start)
        assert hit.reused and hit.id == cold.id
    base_size = int(client.images.get(base.ref).attrs.get("Size") or 0)
    return {"image": name, "lock": str(path.relative_to(REPO)), "pins": len(lock.pins),
            "wheels_mb": round(info["bytes"] / 1e6), "download_s": round(download, 1),
            "build_s": round(cold.seconds, 1), "cold_s": round(download + cold.seconds, 1),
            "stack_check_s": round(stack_s, 1), "warm_s": round(statistics.median(hits), 3),
            "image_mb": round(cold.size / 1e6),
            "added_mb": round((cold.size - base_size) / 1e6),
            "stack": stack.summary(), "libraries": stack.libraries, "tag": cold.tag}


def bench(framework: str, client, repeat: int) -> dict:
    lock = parse_lock(LOCKS[framework])
    base = dk.resolve_base(client, "cpu")
    recipe = dk.recipe_for(framework, "cpu", lock, base)
    try:
        client.images.remove(recipe.tag)
    except Exception:  # noqa: BLE001 - not there
        pass
    target = dk.target_of(client, base)
    start = time.perf_counter()
    house = dk.wheelhouse_for(lock, target)
    download = time.perf_counter() - start
    info = json.loads((house / READY).read_text())
    built = dk.build_image(lock, framework, "cpu", client=client)
    assert not built.reused
    hits = []
    for _ in range(repeat):
        start = time.perf_counter()
        again = dk.build_image(lock, framework, "cpu")
        hits.append(time.perf_counter() - start)
        assert again.reused and again.id == built.id
    # The same from a fresh process, as `lockguard build` runs it: imports included.
    code = ("import sys; from pathlib import Path; from lockguard.locks.parser import parse_lock; "
            "from lockguard.envs.docker import build_image; "
            "assert build_image(parse_lock(Path(sys.argv[1])), sys.argv[2], 'cpu').reused")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(LOCKS[framework]), framework], check=True,
                   cwd=REPO)
    process_hit = time.perf_counter() - start
    base_size = int(client.images.get(base.ref).attrs.get("Size") or 0)
    return {"framework": framework, "lock": str(LOCKS[framework].relative_to(REPO)),
            "pins": len(lock.pins), "wheels_mb": round(info["bytes"] / 1e6, 1),
            "download_s": round(download, 1), "build_s": round(built.seconds, 1),
            "image_mb": round(built.size / 1e6), "added_mb": round((built.size - base_size) / 1e6),
            "hit_s": round(statistics.median(hits), 3), "hit_max_s": round(max(hits), 3),
            "hit_process_s": round(process_hit, 2),
            "tag": built.tag}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="numpy,torch,jax,tensorflow")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--base", default="lockguard-test/python:3.11-bookworm",
                        help="local base image (LOCKGUARD_BASE_IMAGE)")
    parser.add_argument("--accelerators", nargs="?", const=",".join(ACCELERATOR_IMAGES),
                        metavar="IMAGES", help="the CUDA/TPU images instead (default: all of "
                        f"{', '.join(ACCELERATOR_IMAGES)})")
    args = parser.parse_args()
    os.environ[dk.BASE_IMAGE_ENV] = args.base
    client = dk.connect()
    if args.accelerators:
        accelerators(args, client)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="lockguard-bench-docker-") as tmp:
        # A fresh cache: cold wheelhouses and no conformance records (images are rebuilt anyway).
        os.environ["LOCKGUARD_CACHE"] = tmp
        for framework in args.frameworks.split(","):
            print(f"{framework}: building …", file=sys.stderr, flush=True)
            rows.append(bench(framework, client, args.repeat))
    cores = os.cpu_count()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"base": args.base, "cores": cores, "repeat": args.repeat, "results": rows,
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (RESULTS / "docker.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"base {args.base}, {cores} cores")
    print(f"{'framework':<11}{'pins':>5}{'wheels MB':>10}{'download s':>11}{'build s':>9}"
          f"{'image MB':>9}{'added MB':>9}{'hit s':>8}{'hit proc s':>11}")
    for r in rows:
        print(f"{r['framework']:<11}{r['pins']:>5}{r['wheels_mb']:>10}{r['download_s']:>11}"
              f"{r['build_s']:>9}{r['image_mb']:>9}{r['added_mb']:>9}{r['hit_s']:>8}"
              f"{r['hit_process_s']:>11}")


def accelerators(args: argparse.Namespace, client) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="lockguard-bench-docker-") as tmp:
        os.environ["LOCKGUARD_CACHE"] = tmp  # cold wheelhouses, no records
        for name in args.accelerators.split(","):
            print(f"{name}: building …", file=sys.stderr, flush=True)
            rows.append(bench_accelerator(name, client, args.repeat))
    out = {"base": args.base, "cores": os.cpu_count(), "repeat": args.repeat, "results": rows,
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (RESULTS / "docker-accelerators.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"base {args.base}, {out['cores']} cores")
    print(f"{'image':<11}{'pins':>5}{'wheels MB':>10}{'download s':>11}{'build s':>8}"
          f"{'cold s':>8}{'stack s':>8}{'warm s':>8}{'image MB':>9}  stack")
    for r in rows:
        print(f"{r['image']:<11}{r['pins']:>5}{r['wheels_mb']:>10}{r['download_s']:>11}"
              f"{r['build_s']:>8}{r['cold_s']:>8}{r['stack_check_s']:>8}"
              f"{r['warm_s']:>8}{r['image_mb']:>9}  {r['stack']}")


if __name__ == "__main__":
    main()
