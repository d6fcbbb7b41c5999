"""The speed table: run the benchmarks behind it and print it, each figure against its target.

    python benchmarks/run.py                      # run every benchmark of the table, print it
    python benchmarks/run.py --only noop,diff     # run these rows' benchmarks, print the table
    python benchmarks/run.py --print              # print the table from benchmarks/results/
    python benchmarks/run.py --print --docs       # ... and write it into docs/performance.md

Each row names the benchmark that measures it (a script of this folder, writing its JSON into
benchmarks/results/; the test suite's row, dev/bench_tests.py into dev/results/: it measures
lockguard's own tests, not lockguard); ratios are measured side by side inside one script's
run. The table is printed as Markdown, with the load average each benchmark saw: on a machine
busy with other work, wall times stretch and the figures say so. `--docs` replaces the table
between the markers in docs/performance.md, the one place of the docs that quotes these
figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOCS = HERE.parent / "docs" / "performance.md"
BEGIN, END = "<!-- speed table: benchmarks/run.py --docs -->", "<!-- end of the speed table -->"


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _s(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 120:
        return f"{int(value // 60)} min {value % 60:02.0f} s"
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def _load(values: Any) -> str:
    if not values:
        return ""
    flat = [v for v in values if isinstance(v, (int, float))] or [
        v for pair in values for v in (pair if isinstance(pair, list) else [pair])
        if isinstance(v, (int, float))]
    return f"{min(flat):.1f}–{max(flat):.1f}" if flat else ""


@dataclass(frozen=True)
class Row:
    key: str
    what: str
    command: list[str]  # the benchmark, run from the repository root
    result: Path  # its JSON
    # (measured text, met: bool | None, load text) from the result document
    read: Callable[[dict], tuple[str, bool | None, str]]
    target: str


def _noop(name: str) -> Callable[[dict], tuple[str, bool | None, str]]:
    def read(doc: dict) -> tuple[str, bool | None, str]:
        replayed, full = _get(doc, name, "median_s"), _get(doc, name, "full_median_s")
        if replayed is None:
            return "—", None, ""
        text = f"{_s(replayed)} (the full check: {_s(full)})" if full else _s(replayed)
        return text, replayed <= 0.25, _load(_get(doc, name, "load"))
    return read


def _overhead(doc: dict) -> tuple[str, bool | None, str]:
    ratio = _get(doc, "overhead", "overhead_ratio")
    if ratio is None:
        return "—", None, ""
    hand, guarded = _get(doc, "overhead", "by_hand_median_s"), _get(
        doc, "overhead", "lockguard_median_s")
    fixed = _get(doc, "overhead", "fixed_median_s")
    text = f"×{ratio:.2f} ({_s(hand)} → {_s(guarded)})"
    if fixed is not None:
        text += f"; per run beyond import and steps: {_s(fixed)}"
    return text, ratio <= 1.05, _load(_get(doc, "overhead", "load"))


def _quickstart(doc: dict) -> tuple[str, bool | None, str]:
    total, checks = _get(doc, "median", "total_s"), _get(doc, "median", "checks_s")
    if total is None:
        return "—", None, ""
    loads = [v for run in doc.get("runs", []) for v in (run.get("load_before", [])[:1]
                                                         + run.get("load_after", [])[:1])]
    return (f"{_s(total)} (the checks {_s(checks)})", total <= 60 and checks <= 30,
            _load(loads))


def _ab(doc: dict) -> tuple[str, bool | None, str]:
    ratio = doc.get("building_over_bare_uv")
    if ratio is None:
        return "—", None, ""
    cold = _get(doc, "median", "cold_s")
    also = doc.get("cold_over_also_cold")
    return (f"{_s(cold)} cold; building ×{ratio:.2f} of bare uv "
            f"({_s(doc['building_in_check_s'])} vs {_s(_get(doc, 'median', 'bare_uv_s'))})"
            + (f"; ×{also:.2f} of the cold check of {doc['also_label']}, in the same run"
               if also is not None and doc.get("also_label") else ""),
            cold <= 45 and ratio <= 1.2, _load(doc.get("load_average")))


def _suite(doc: dict) -> tuple[str, bool | None, str]:
    fast, cold, warm = (_get(doc, k, "wall_s") for k in ("fast", "ci_cold", "ci_warm"))
    if fast is None and cold is None:
        return "—", None, ""
    met = all(v is None or v <= t for v, t in ((fast, 60), (cold, 720), (warm, 360)))
    # The whole suite in the checkout (bench_tests --only suite: warm, no install), where it was
    # measured after the last `.ci/run` pair.
    suite = _get(doc, "suite_warm", "wall_s")
    commit = _get(doc, "ci_cold", "commit")
    later = (suite is not None and (_get(doc, "suite_warm", "measured_at") or "")
             > (_get(doc, "ci_warm", "measured_at") or ""))
    # Where the warm suite's time goes (bench_tests --only profile): the trainings' share.
    prof = _get(doc, "suite_profile", "profile")
    share = (f"; trainings {prof['training_worker_s'] / prof['worker_s']:.0%} of the workers' "
             f"time ({prof['trainings']} runs, profiled)" if prof and prof["worker_s"] else "")
    text = (f"cold {_s(cold)}, warm {_s(warm)}" + (f" (at {commit})" if commit else "")
            + (f"; the suite alone, warm, since: {_s(suite)}" if later else "")
            + f"; fast subset {_s(fast)}" + share)
    return (text, met, _load([x for k in ("fast", "ci_cold", "ci_warm", "suite_warm")
                              for x in (_get(doc, k, "load_before") or [])[:1]]))


def _diff(doc: dict) -> tuple[str, bool | None, str]:
    big = doc.get("100000")
    if big is None:
        return "—", None, ""
    return (f"{_s(big['median_wall_s'])} wall, {_s(big['median_cpu_s'])} CPU, "
            f"{big['median_peak_mb']:.0f} MB; ×{doc.get('cpu_ratio_10x', 0):.1f} CPU for 10× the "
            "pins", big["median_wall_s"] <= 3, _load([doc.get("load_before"),
                                                      doc.get("load_after")]))


def _locate(doc: dict) -> tuple[str, bool | None, str]:
    if not doc:
        return "—", None, ""
    ratios = {sid: row["ratio"] for sid, row in doc.items()}
    text = "; ".join(f"{sid} ×{doc[sid]['ratio']:.2f} ({_s(doc[sid]['normal_s'])} → "
                     f"{_s(doc[sid]['located_s'])})" for sid in doc)
    return text, max(ratios.values()) <= 2, _load([row.get("load") for row in doc.values()])


PY = sys.executable
BENCH = "benchmarks/bench_check.py"
ROWS = [
    Row("noop", "unchanged-lock `check` (answered from provenance, then replayed)",
        [PY, BENCH, "--only", "fastpath"], RESULTS / "check.json", _noop("fastpath"),
        "≤ 0.25 s"),
    Row("base", "`check --base main`, lock unchanged",
        [PY, BENCH, "--only", "base"], RESULTS / "check.json", _noop("base"), "≤ 0.25 s"),
    Row("overhead", "overhead around a warm `torch.mlp` run",
        [PY, BENCH, "--only", "overhead"], RESULTS / "check.json", _overhead, "≤ ×1.05"),
    Row("quickstart", "the README's first command, cold, PyPI only",
        [PY, "benchmarks/bench_quickstart.py", "--repeat", "1"], RESULTS / "quickstart.json",
        _quickstart, "≤ 60 s; the checks ≤ 30 s"),
    Row("ab", "cold A/B torch 2.13.0+cpu → 2.14.1 (two 5 GB environments)",
        [PY, "benchmarks/bench_ab.py", "--repeat", "1"], RESULTS / "ab.json", _ab,
        "≤ 45 s; building ≤ ×1.2 of bare uv"),
    # lockguard's own test suite: dev tooling (dev/), whose CI figures the table still shows.
    Row("suite", "`.ci/run` in a fresh clone (cold, warm) and the fast subset",
        [PY, "dev/bench_tests.py"], HERE.parent / "dev" / "results" / "tests.json", _suite,
        "cold ≤ 12 min, warm ≤ 6 min, fast ≤ 60 s"),
    Row("diff", "`lockguard diff` of two 100,000-pin locks",
        [PY, "benchmarks/bench_diff.py"], RESULTS / "diff.json", _diff, "≤ 3 s"),
    # The interpreters are the frameworks' environments: bench_locate.py PYTHON SCENARIO, by
    # hand, one framework a call (its bare command here says so and keeps the last result).
    Row("locate", "a localisation run against the scenario's normal run (whole process)",
        [PY, "benchmarks/bench_locate.py"], RESULTS / "locate.json", _locate, "≤ ×2"),
]


def table() -> str:
    lines = ["| what | measured | target | met | load |", "|---|---|---|---|---|"]
    for row in ROWS:
        path = row.result
        doc = json.loads(path.read_text()) if path.exists() else {}
        measured, met, load = row.read(doc)
        mark = {True: "yes", False: "**no**", None: "not measured"}[met]
        lines.append(f"| {row.what} | {measured} | {row.target} | {mark} | {load} |")
    return "\n".join(lines) + "\n"


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOCS}: the markers {BEGIN!r} and {END!r} are missing")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOCS.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated rows to run: "
                        + ",".join(r.key for r in ROWS))
    parser.add_argument("--print", action="store_true", help="run nothing; print the table")
    parser.add_argument("--docs", action="store_true", help="write it into docs/performance.md")
    args = parser.parse_args()
    chosen = [r for r in ROWS if not args.only or r.key in args.only.split(",")]
    unknown = set(args.only.split(",")) - {r.key for r in ROWS} if args.only else set()
    if unknown:
        raise SystemExit(f"unknown rows: {', '.join(sorted(unknown))}")
    if not args.print:
        for row in chosen:
            print(f"== {row.key}: {' '.join(row.command[1:])}", flush=True)
            done = subprocess.run(row.command, cwd=HERE.parent)
            if done.returncode != 0:
                print(f"   ({row.key} exited {done.returncode}: its row keeps the last result)")
    text = table()
    print(text)
    if args.docs:
        write_docs(text)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
