"""pip-tools vs uv resolving a requirements set, cold and warm, side by side.

    python benchmarks/bench_resolve.py [--set ml|small] [--repeat N] [--skip-cold]
                                       [--resolver pip-tools|uv ...]

Both resolvers run through lockguard.locks.resolvers.compile, i.e. exactly what `lockguard lock`
does: hashes generated, from PyPI and whatever index requirements.in names, never the machine's
pip configuration (a lock is the project's; see lockguard.locks.resolvers). `--set ml` is a
realistic ML stack (torch, jax, tensorflow and the data stack), `--set small` the small lock of
the quickstart's kind (numpy and six).

cold: every cache (pip's, pip-tools', uv's) is a fresh temp dir and there is no existing lock.
warm: the same caches again, still without an existing lock (so the resolver does the whole
resolution, from warm metadata caches). The pinned pip-tools env is built before timing starts.

Writes benchmarks/results/resolve.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lockguard.locks import resolvers  # noqa: E402
from lockguard.locks.resolvers import piptools  # noqa: E402

# The three framework families with their usual companions, and the data stack around them.
ML_REQUIREMENTS = """\
torch
torchvision
torchaudio
jax
jaxlib
tensorflow-cpu
numpy
pandas
scipy
scikit-learn
matplotlib
"""

SMALL_REQUIREMENTS = """\
numpy
six
"""
SETS = {"ml": ML_REQUIREMENTS, "small": SMALL_REQUIREMENTS}

FRAMEWORKS = ("torch", "torchvision", "torchaudio", "jax", "jaxlib", "tensorflow-cpu", "numpy",
              "keras", "protobuf", "ml-dtypes")

VARIANTS = {
    "pip-tools": dict(resolver="pip-tools"),
    "uv": dict(resolver="uv"),
}


def _pins(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.MULTILINE))


def _run_once(variant: str, src: Path, work: Path, caches: Path) -> dict[str, object]:
    out = work / f"{variant.replace(', ', '-').replace(' ', '-')}.txt"
    out.unlink(missing_ok=True)  # no seed: a full resolution every time
    env = {
        "PIP_CACHE_DIR": str(caches / "pip"),
        "XDG_CACHE_HOME": str(caches / "xdg"),  # pip-tools' own metadata cache lives here
        "UV_CACHE_DIR": str(caches / "uv"),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    start = time.perf_counter()
    try:
        resolvers.compile(src, out, **VARIANTS[variant])  # type: ignore[arg-type]
        seconds = time.perf_counter() - start
        pins = _pins(out)
        return {"seconds": round(seconds, 2), "ok": True, "packages": len(pins),
                "pins": {k: v for k, v in pins.items() if k in FRAMEWORKS}, "_all": pins}
    except resolvers.ResolveError as exc:
        return {"seconds": round(time.perf_counter() - start, 2), "ok": False, "error": str(exc)}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="req_set", choices=sorted(SETS), default="ml",
                        help="the requirements resolved (default: ml)")
    parser.add_argument("--repeat", type=int, default=1, help="warm runs per resolver (median)")
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--resolver", action="append", choices=sorted(VARIANTS),
                        help="only these (repeatable); default: all")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="default: benchmarks/results/resolve.json (resolve-small.json "
                             "for --set small)")
    args = parser.parse_args()
    requirements = SETS[args.req_set]
    if args.output is None:
        suffix = "" if args.req_set == "ml" else f"-{args.req_set}"
        args.output = ROOT / f"benchmarks/results/resolve{suffix}.json"
    variants = args.resolver or list(VARIANTS)

    start = time.perf_counter()
    tool_python = piptools.tool_python(lambda m: print(m, file=sys.stderr))
    bootstrap_s = time.perf_counter() - start

    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="lockguard-bench-") as tmp:
        work = Path(tmp)
        src = work / "requirements.in"
        src.write_text(requirements)
        for variant in variants:
            caches = work / "caches" / variant.replace(", ", "-").replace(" ", "-")
            row: dict[str, object] = {}
            if not args.skip_cold:
                print(f"{variant}: cold ...", file=sys.stderr, flush=True)
                row["cold"] = _run_once(variant, src, work, caches)
            warm = []
            for i in range(args.repeat):
                print(f"{variant}: warm {i + 1}/{args.repeat} ...", file=sys.stderr, flush=True)
                warm.append(_run_once(variant, src, work, caches))
            ok = [w["seconds"] for w in warm if w["ok"]]
            row["warm"] = {**warm[-1], "seconds": round(statistics.median(ok), 2) if ok else None,
                           "runs_s": [w["seconds"] for w in warm]}
            results[variant] = row

    ratios = {}
    for mode in ("cold", "warm"):
        pt, uv = (results.get(v, {}).get(mode) for v in ("pip-tools", "uv"))
        if pt and uv and pt.get("ok") and uv.get("ok") and uv["seconds"]:
            ratios[mode] = round(pt["seconds"] / uv["seconds"], 1)

    # Do the resolvers agree? (same inputs, same indexes and constraints)
    all_pins = {v: results[v]["warm"].pop("_all", None) for v in results}
    for row in results.values():
        if isinstance(row.get("cold"), dict):
            row["cold"].pop("_all", None)
    pt_pins, uv_pins = all_pins.get("pip-tools"), all_pins.get("uv")
    disagree = None
    if pt_pins is not None and uv_pins is not None:
        disagree = {name: [pt_pins.get(name), uv_pins.get(name)]
                    for name in sorted(set(pt_pins) | set(uv_pins))
                    if pt_pins.get(name) != uv_pins.get(name)}

    report = {
        "benchmark": "resolve",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count()},
        "tools": {"pip-tools": piptools.PIP_TOOLS_VERSION, "pip": piptools.PIP_VERSION,
                  "uv": resolvers.resolver_identity("uv"), "tool_python": tool_python,
                  "tool_env_bootstrap_s": round(bootstrap_s, 2)},
        "requirements": requirements.split(),
        "results": results,
        "ratio_pip_tools_over_uv": ratios,
        "pins_pip_tools_vs_uv_differ": disagree,
        "notes": [
            "cold: fresh pip, pip-tools and uv caches in a temp dir; warm: the same caches again; "
            "never an existing lock to seed from",
            "both resolvers see PyPI only: lockguard resolves with the lock's and "
            "requirements.in's indexes, never the machine's pip configuration",
            "pip's HTTP cache stores nothing here (the network proxy sends no caching headers), "
            "so pip-compile downloads every resolved wheel in full on every run, warm or cold; "
            "its warm gain comes from pip-tools' own dependency cache",
            "timings on a shared 2-core machine; compare ratios, not absolute seconds",
        ],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")

    print(f"\n{'resolver':<16}{'cold s':>10}{'warm s':>10}  packages  torch / jax / tensorflow-cpu")
    for variant, row in results.items():
        cells = []
        for mode in ("cold", "warm"):
            r = row.get(mode)
            cells.append("-" if not r else (f"{r['seconds']:.1f}" if r.get("ok") else "failed"))
        last = row["warm"]
        pins = last.get("pins", {})
        picked = " / ".join(str(pins.get(p, "?")) for p in ("torch", "jax", "tensorflow-cpu"))
        print(f"{variant:<16}{cells[0]:>10}{cells[1]:>10}  {last.get('packages', '-'):>8}  {picked}")
    if ratios:
        print(f"{'pip-tools / uv':<16}" + "".join(f"{(str(ratios[m]) + 'x') if m in ratios else '-':>10}"
                                              for m in ("cold", "warm")))
    for variant, row in results.items():
        for mode, r in row.items():
            if isinstance(r, dict) and not r.get("ok"):
                print(f"{variant} {mode}: {r.get('error')}")
    if disagree is not None:
        print("pip-tools and uv pin the same versions" if not disagree else
              "pins that differ (pip-tools, uv): " + ", ".join(f"{k} {a} {b}" for k, (a, b) in disagree.items()))
    print(f"\nwrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
