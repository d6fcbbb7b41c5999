"""The Python half of benchmarks/gpu/run.sh: timing runs, and the summary with its assertions.

    python gpurun.py measure --config CFG --device cuda --label accel --repeat 3 --jobs 4 \
                             --out DIR [--steps N] --scenario torch --scenario jax
    python gpurun.py summarize --work WORK --out OUT --device cuda [--dry-run]
    python gpurun.py graph-break-project --dir DIR --timeout SECONDS

`measure` runs each scenario REPEAT times through lockguard's own runner in the local
environment (the interpreter running this script, as `--env local` does), a run at a time in
each of --jobs threads, and writes every RunResult to DIR/<label>/<scenario>.<i>.json as it
ends (a phase cut short by its timeout keeps what finished): the raw material for the timings
and for the run-to-run spread, which `check --repeat` reports only as "not bitwise
reproducible". `graph-break-project` writes the project of run.sh's graph-break phase:
tests/test_compile.py's lg_testlayer 2.0 (its .item() breaks torch.compile's graph) trained on
the CPU and on the GPU.

`summarize` reads what run.sh left in WORK (phases.tsv, the record/check/fallback reports in
OUT, the measured runs) and writes OUT/gpu.json (the shape of benchmarks/results/gpu.json),
prints a compact summary and exits 1 when an assertion fails: every scenario recorded and
timed on the device asked for (each timing phase ended by itself with all its runs), and
`check --device cuda` with the GPU hidden exiting 1 with `device_fallback` for every torch and
jax scenario (a dry run, --device cpu elsewhere, asserts the same: it never had a GPU to begin
with); TF32 off in every torch run, torch.cnn.compile's float32 outputs within float32 rounding
of float64, and the graph break the same on both devices. With --docker, the docker phases
too: the lock's CUDA images built (their stack proven), every scenario recorded in them on the
GPU with the stack in its fingerprint, and with no GPU asked for, device_fallback naming the
cause.

Needs lockguard importable (run.sh puts the wheel-installed copy on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import statistics
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

TIMINGS = ("import_s", "first_step_s", "step_median_s", "total_s")
REPORTS = ("record", "check", "fallback", "docker-record", "docker-fallback")
FALLBACK_FRAMEWORKS = ("torch", "jax")
# What a docker run with no GPU request must say (the harness: lockguard/harness/
# _lockguard_harness/devices.py), in every verdict.
NO_DRIVER = "no NVIDIA driver visible in the container"


# ------------------------------------------------------------------------------------ measure

def measure(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from lockguard.config import load_config
    from lockguard.envs.local import LocalEnv
    from lockguard.files import write_text
    from lockguard.flows.pipeline import run_requests
    from lockguard.scenarios import select

    config = load_config(Path(args.config))
    # The compiled scenarios first: their first step is the longest (a cold CPU compile took
    # 67-73 s of a 75-87 s run on the first H200 host), so they never start last.
    chosen = sorted(select(config, args.scenario), key=lambda sc: "compile" not in sc.id)
    env = LocalEnv(config.python_path)
    jobs = [(index, env, sc.request(steps=args.steps or config.steps or sc.steps,
                                    seed=config.seed, device=args.device,
                                    threads=config.threads, timeout=config.timeout))
            for index in range(1, args.repeat + 1)  # whole rounds: repeats spread in time
            for sc in chosen]
    out = Path(args.out) / args.label
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def one(job: tuple[int, Any, Any]) -> Any:
        # One run at a time through lockguard's runner, its result written as soon as it ends:
        # a phase cut short by its timeout keeps every run that finished (the first H200 run's
        # CPU side, killed at 105 s, had kept none).
        index, env_, request = job
        result = run_requests([(env_, request)], workers=1)[0]
        write_text(out / f"{request.scenario_id}.{index}.json",
                   json.dumps(result.model_dump(mode="json"), indent=1, sort_keys=True) + "\n")
        t = result.timings
        print(f"  {time.perf_counter() - start:6.1f} s  {request.scenario_id} #{index}: "
              f"{result.status.value}, {t.total_s or 0:.1f} s (import {t.import_s or 0:.1f} s, "
              f"first step {t.first_step_s or 0:.2f} s)", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, jobs))
    bad = [f"{r.scenario}: {r.status.value}" for r in results if r.status.value != "ok"]
    print(f"measure --device {args.device}: {len(results)} runs in "
          f"{time.perf_counter() - start:.1f} s with {args.jobs} jobs"
          + (f"; not ok: {', '.join(bad)}" if bad else ""))
    return 0


# ---------------------------------------------------------------------------- pure summaries

def _bits_equal(a: float, b: float) -> bool:
    from lockguard.compare.numerics import bitwise_equal

    return bitwise_equal(a, b)


def spread(series: list[list[float]], per_step: bool = True) -> dict[str, Any]:
    """How far repeated runs of one scenario are apart, index by index (steps or outputs):
    which indices are not bitwise equal across the runs, and the greatest max - min."""
    if not series or not any(series):
        return {"values": 0}
    lengths = sorted({len(s) for s in series})
    n = lengths[0]
    columns = [[s[i] for s in series] for i in range(n)]
    widths = [max(c) - min(c) for c in columns]
    differing = [i for i, c in enumerate(columns) if any(not _bits_equal(v, c[0]) for v in c)]
    rel = [w / abs(statistics.median(c)) if statistics.median(c) else (0.0 if w == 0 else
                                                                        float("inf"))
           for w, c in zip(widths, columns)]
    out: dict[str, Any] = {
        "values": n,
        "bitwise_identical": not differing and len(lengths) == 1,
        "first_differing": differing[0] if differing else None,
        "differing": len(differing),
        "max_abs": max(widths) if widths else 0.0,
        "max_rel": max(rel) if rel else 0.0,
    }
    if len(lengths) > 1:
        out["lengths"] = lengths
    if per_step:
        out["per_step_abs"] = widths
    return out


def determinism(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-to-run determinism of one scenario on one device, from its ok runs."""
    ok = [r for r in runs if r.get("status") == "ok"]
    if len(ok) < 2:
        return {"runs": len(ok), "bitwise_identical": None}
    parts = {"losses": spread([r["losses"] for r in ok]),
             "grad_norms": spread([r["grad_norms"] for r in ok]),
             "outputs": spread([r["outputs"] for r in ok], per_step=False)}
    digests = len({r.get("param_digest") for r in ok}) == 1
    identical = digests and all(p.get("bitwise_identical", True) is not False
                                for p in parts.values())
    return {"runs": len(ok), "bitwise_identical": identical, "param_digests_equal": digests,
            **parts}


def timing(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each timing over the ok runs (and of compile_s when the runs report it)."""
    ok = [r for r in runs if r.get("status") == "ok"]
    out: dict[str, Any] = {"runs": len(runs), "ok": len(ok),
                           "devices": sorted({str(r.get("device")) for r in runs})}
    for key in TIMINGS:
        values = [r["timings"][key] for r in ok if r["timings"].get(key) is not None]
        out[key] = statistics.median(values) if values else None
    compile_s = [r["compile"]["compile_s"] for r in ok
                 if r.get("compile") and r["compile"].get("compile_s") is not None]
    if compile_s:
        out["compile_s"] = statistics.median(compile_s)
    return out


def ratios(accel: dict[str, Any], cpu: dict[str, Any]) -> dict[str, float | None]:
    """accelerator time / cpu time per timing: below 1 the accelerator is faster."""
    return {key: (accel[key] / cpu[key] if accel.get(key) and cpu.get(key) else None)
            for key in TIMINGS}


def verdicts(report: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    if not report:
        return {}
    return {v["scenario"]: {"framework": v["framework"], "verdict": v["verdict"],
                            "found_device": v.get("found_device"),
                            "nondeterministic": v.get("nondeterministic", False),
                            "reasons": v.get("reasons", [])}
            for v in report.get("verdicts", [])}


def fallback_assertion(rc: int | None, report: dict[str, Any] | None,
                       scenarios: list[str]) -> tuple[bool, str]:
    """Whether `check --device cuda` with the GPU hidden did what it must: exit 1 and
    device_fallback for every torch and jax scenario."""
    if report is None:
        return False, f"no report (exit {rc})"
    got = verdicts(report)
    missing = [s for s in scenarios if s not in got]
    if missing:
        return False, f"exit {rc}; no verdict for {', '.join(missing)}"
    wrong = [f"{s}: {got[s]['verdict']} on {got[s]['found_device']}" for s in scenarios
             if got[s]["framework"] in FALLBACK_FRAMEWORKS
             and got[s]["verdict"] != "device_fallback"]
    if rc != 1 or wrong:
        return False, f"exit {rc} (expected 1); " + ("; ".join(wrong) or "all device_fallback")
    return True, f"exit 1, device_fallback for all {len(scenarios)} scenarios"


def tf32_assertion(accel: dict[str, list[dict[str, Any]]]) -> tuple[bool, str]:
    """Bundled torch scenarios train in true float32 on the GPU: TF32 off for matmuls and for
    cuDNN convolutions in every timing run's fingerprint (torch's default leaves cuDNN's on,
    and the harness did until the first H200 run showed it)."""
    seen, on = 0, []
    for sid, runs in sorted(accel.items()):
        if not sid.startswith("torch."):
            continue
        for r in runs:
            det = (r.get("fingerprint") or {}).get("determinism") or {}
            flags = tuple("unreadable (mixed TF32 APIs?)" if det.get(k) is None else det[k]
                          for k in ("cuda_matmul_allow_tf32", "cudnn_allow_tf32"))
            seen += 1
            if flags != (False, False):
                on.append(f"{sid}: matmul {flags[0]}, cuDNN {flags[1]}")
    if not seen:
        return False, "no torch timing run to read"
    if on:
        return False, "; ".join(sorted(set(on)))
    return True, f"off for matmuls and cuDNN in all {seen} torch runs"


FP32_CONV = "torch.cnn.compile"  # the compiled twin: its record holds eager vs float64
FP32_CONV_LIMIT = 1e-5  # TF32 convolutions put its outputs 8.7e-4 away; the CPU 2.3e-7


def fp32_conv_assertion(report: dict[str, Any] | None) -> tuple[bool, str]:
    """torch.cnn.compile's eager float32 outputs as far from float64 as float32 rounding puts
    them (the accuracy check's rmse), not as far as TF32 convolutions would."""
    for e in (report or {}).get("evidence", []):
        if e.get("scenario") != FP32_CONV:
            continue
        result = (e.get("candidate") or {}).get("result") or {}
        series = ((result.get("compile") or {}).get("accuracy") or {}).get("series") or {}
        error = (series.get("outputs") or {}).get("eager_vs_fp64")
        if error is None:
            return False, f"{FP32_CONV}: no eager-vs-float64 figure in its record"
        return error <= FP32_CONV_LIMIT, (f"{FP32_CONV} on {result.get('device')}: outputs "
                                          f"{error:.3g} from float64 (limit {FP32_CONV_LIMIT:g})")
    return False, f"no {FP32_CONV} run in the record report"


def graph_break_summary(report: dict[str, Any] | None) -> dict[str, Any]:
    """scenario -> what torch.compile reported, from run.sh's graph-break phase."""
    out: dict[str, Any] = {}
    for e in (report or {}).get("evidence", []):
        result = (e.get("candidate") or {}).get("result") or {}
        diag = result.get("compile") or {}
        out[e.get("scenario")] = {
            "status": result.get("status"),
            # the harness measures the GPU's peak around the run: nothing there, nothing ran there
            "on_cuda": (result.get("peak_device_memory_bytes") or 0) > 0,
            "graph_breaks": diag.get("graph_breaks"), "graphs": diag.get("graphs"),
            "recompiles": diag.get("recompiles"),
            "break_reasons": diag.get("break_reasons") or []}
    return out


def graph_break_assertion(rc: int | None, found: dict[str, Any],
                          dry_run: bool) -> tuple[bool, str]:
    """torch.compile reports the same graph break, with the same reason, for the same script
    with its tensors on the GPU as on the CPU (in a dry run: on the CPU twice)."""
    cpu, gpu = found.get("break-cpu"), found.get("break-cuda")
    if not cpu or not gpu:
        return False, f"exit {rc}; runs: {', '.join(sorted(found)) or 'none'}"
    if not dry_run and not gpu["on_cuda"]:
        return False, "the cuda script's training used no GPU memory: it did not run there"
    keys = ("graph_breaks", "graphs", "recompiles", "break_reasons")
    same = all(cpu[k] == gpu[k] for k in keys)
    ok = rc == 0 and same and (cpu["graph_breaks"] or 0) >= 1
    detail = (f"exit {rc}; cpu {cpu['graph_breaks']} break(s), {cpu['graphs']} graph(s); "
              f"gpu {gpu['graph_breaks']} break(s), {gpu['graphs']} graph(s)")
    if not same:
        detail += "; " + ", ".join(f"{k}: {cpu[k]} vs {gpu[k]}" for k in keys
                                   if cpu[k] != gpu[k])
    elif cpu["break_reasons"]:
        detail += f"; {cpu['break_reasons'][0]}"
    return ok, detail


COMPILE_TESTS = Path(__file__).resolve().parents[2] / "tests" / "test_compile.py"
GRAPH_BREAK_CONFIG = """\
# written by benchmarks/gpu/gpurun.py graph-break-project
lock = "host-numpy.txt"
golden_dir = "golden"
timeout = {timeout}
scenarios = ["break-cpu", "break-cuda"]
[scenario.break-cpu]
script = "train_cpu.py"
framework = "torch"
steps = 4
[scenario.break-cuda]
script = "train_cuda.py"
framework = "torch"
steps = 4
"""


# The compile tests' training of lg_testlayer, with its model and data moved to DEVICE (the
# same data on both: drawn on the CPU). torch.set_default_device would spare the copy, but its
# function mode becomes where torch.compile places the break ("torch/utils/_device.py").
TRAINING = """\
import torch
from torch import nn

from lg_testlayer import ScaledTanh

DEVICE = {device}


def run(steps, seed, timed=iter):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), ScaledTanh(16), nn.Linear(16, 2)).to(DEVICE)
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8).to(DEVICE), torch.randn(32, 2).to(DEVICE)
    losses = []
    for _ in timed(range(steps)):
        opt.zero_grad(set_to_none=True)
        loss = ((compiled(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {{"losses": losses, "params": dict(model.named_parameters())}}
"""


def compile_test_text(name: str) -> str:
    """A source text of tests/test_compile.py (TORCH_V2: lg_testlayer 2.0, whose .item() breaks
    torch.compile's graph), read without importing the tests."""
    for node in ast.parse(COMPILE_TESTS.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None)
                                             for t in node.targets] == [name]:
            return textwrap.dedent(ast.literal_eval(node.value))
    raise ValueError(f"{COMPILE_TESTS}: no {name}")


def graph_break_project(args: argparse.Namespace) -> int:
    """Write run.sh's graph-break project into DIR (beside the host-numpy.txt lock run.sh put
    there): the compile tests' layer, trained once on the CPU and once on the GPU."""
    root = Path(args.dir)
    (root / "lg_testlayer.py").write_text(compile_test_text("TORCH_V2"), encoding="utf-8")
    for where, device in (("cpu", '"cpu"'),
                          ("cuda", '"cuda" if torch.cuda.is_available() else "cpu"')):
        (root / f"train_{where}.py").write_text(TRAINING.format(device=device),
                                                encoding="utf-8")
    (root / "lockguard.toml").write_text(GRAPH_BREAK_CONFIG.format(timeout=args.timeout),
                                         encoding="utf-8")
    return 0


def docker_assertions(phases: dict[str, dict[str, Any]], reports: dict[str, Any],
                      dry_run: bool) -> list[tuple[str, bool, str]]:
    """The docker phases (run.sh step 6): images built, the GPU runs in them, the fallback."""
    out = []
    build = phases.get("docker-build", {})
    out.append(("docker: the lock's CUDA images build, stack proven", build.get("rc") == 0,
                f"exit {build.get('rc')}" + (f" ({build['note']})" if build.get("note") else "")))
    if not dry_run:
        rec, rc = reports.get("docker-record"), phases.get("docker-record", {}).get("rc")
        runs = [e["candidate"]["result"] for e in (rec or {}).get("evidence", [])
                if e.get("candidate")]
        bad = [f"{v['scenario']}: {v['verdict']}" for v in (rec or {}).get("verdicts", [])
               if v["verdict"] in ("broken", "device_fallback")]
        stackless = [r["scenario"] for r in runs
                     if not ((r.get("fingerprint") or {}).get("image") or {}).get("stack")]
        out.append(("docker: record on the GPU in the images", rc == 0 and bool(runs)
                    and not bad and not stackless,
                    f"exit {rc}, {len(runs)} runs" + (f"; {'; '.join(bad)}" if bad else "")
                    + (f"; no stack in {', '.join(stackless)}" if stackless else "")))
    fb, rc = reports.get("docker-fallback"), phases.get("docker-fallback", {}).get("rc")
    got = (fb or {}).get("verdicts", [])
    wrong = [f"{v['scenario']}: {v['verdict']}" for v in got
             if v["verdict"] != "device_fallback" or not any(NO_DRIVER in r
                                                            for r in v.get("reasons", []))]
    out.append(("docker: no GPU asked for gives device_fallback with its cause",
                rc == 1 and bool(got) and not wrong,
                f"exit {rc} (expected 1), {len(got)} verdicts"
                + (f"; without '{NO_DRIVER}': {'; '.join(wrong)}" if wrong else "")))
    return out


# -------------------------------------------------------------------------------- summarize

def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _phases(work: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    path = work / "phases.tsv"
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        name, rc, wall, *note = line.split("\t")
        out[name] = {"rc": None if rc == "-" else int(rc), "wall_s": float(wall),
                     **({"note": note[0]} if note and note[0] else {})}
    return out


def _runs(directory: Path) -> dict[str, list[dict[str, Any]]]:
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        data = _load(path)
        if isinstance(data, dict) and "scenario" in data:
            by_scenario.setdefault(data["scenario"], []).append(data)
    return by_scenario


def _machine(accel_runs: dict[str, list[dict[str, Any]]], host: dict[str, Any]) -> dict:
    """What ran: GPU, driver, CUDA, cuDNN and framework builds, from the runs' fingerprints."""
    out: dict[str, Any] = dict(host)
    for runs in accel_runs.values():
        for r in runs:
            fp = r.get("fingerprint") or {}
            if r.get("framework") == "torch" and "torch" in fp:
                t = fp["torch"]
                out.setdefault("torch", t.get("version"))
                out.setdefault("torch_cuda", t.get("cuda"))
                out.setdefault("cudnn", t.get("cudnn"))
                if t.get("gpu"):
                    out.setdefault("gpu", t["gpu"].get("name"))
                    out.setdefault("gpu_capability", t["gpu"].get("capability"))
            if r.get("framework") == "jax":
                out.setdefault("jax", fp.get("jax"))
                out.setdefault("jaxlib", fp.get("jaxlib"))
                out.setdefault("jax_plugins", fp.get("jax_plugins"))
                out.setdefault("jax_platform_version",
                               (fp.get("backend") or {}).get("platform_version"))
            if fp.get("nvidia"):
                out.setdefault("nvidia_driver", fp["nvidia"])
            libraries = fp.get("cuda")
            if libraries:
                out.setdefault("jax_cuda_libraries", libraries)
            if r.get("device_name") and r.get("device") != "cpu":
                out.setdefault("device_name", r["device_name"])
            cpu = fp.get("cpu") or {}
            out.setdefault("cpu", cpu.get("model"))
            out.setdefault("cores", cpu.get("cores"))
            out.setdefault("python", fp.get("python"))
    return out


def summarize(args: argparse.Namespace) -> int:
    from lockguard.files import write_text

    work, out_dir = Path(args.work), Path(args.out)
    phases = _phases(work)
    reports = {name: _load(out_dir / f"{name}.json") for name in REPORTS}
    scenarios = [line for line in (work / "scenarios.txt").read_text().split() if line] \
        if (work / "scenarios.txt").is_file() else []
    accel = _runs(work / "runs" / "accel")
    cpu = _runs(work / "runs" / "cpu")
    host = _load(work / "host.json") or {}

    per_scenario: dict[str, Any] = {}
    for sid in scenarios:
        a, c = timing(accel.get(sid, [])), timing(cpu.get(sid, []))
        # "accel": the device under test (cuda; cpu in a dry run), "cpu": --device cpu
        per_scenario[sid] = {"accel": a, "cpu": c, "accel_over_cpu": ratios(a, c),
                             "determinism": determinism(accel.get(sid, []))}

    assertions: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        assertions.append({"name": name, "ok": ok, "detail": detail})

    install, importable = phases.get("install", {}), phases.get("install-check", {})
    check("install", install.get("rc") == 0 and importable.get("rc") in (None, 0),
          f"exit {install.get('rc')}" + (f"; {importable.get('note')}" if importable else ""))
    rec = verdicts(reports["record"])
    rec_bad = [f"{s}: {rec[s]['verdict']}" if s in rec else f"{s}: no verdict" for s in scenarios
               if s not in rec or rec[s]["verdict"] in ("broken", "device_fallback")]
    check("record", phases.get("record", {}).get("rc") == 0 and not rec_bad and bool(scenarios),
          f"exit {phases.get('record', {}).get('rc')}, {len(rec)} scenarios"
          + (f"; {'; '.join(rec_bad)}" if rec_bad else ""))
    chk = verdicts(reports["check"])
    chk_rc = phases.get("check", {}).get("rc")
    check("check --rerun --repeat 3", reports["check"] is not None and chk_rc in (0, 1)
          and all(s in chk for s in scenarios),
          f"exit {chk_rc}: " + ", ".join(f"{s} {v['verdict']}"
                                        + (" (nondeterministic)" if v["nondeterministic"] else "")
                                        for s, v in chk.items()))
    check("hidden GPU gives device_fallback",
          *fallback_assertion(phases.get("fallback", {}).get("rc"), reports["fallback"],
                              scenarios))
    if any(s.startswith("torch.") for s in scenarios):
        check("TF32 off in the torch runs", *tf32_assertion(accel))
    if FP32_CONV in scenarios:
        check("float32 convolutions in float32", *fp32_conv_assertion(reports["record"]))
    breaks = graph_break_summary(_load(work / "graph-break.json"))
    if "graph-break" in phases:
        check("torch.compile graph break on the GPU as on the CPU",
              *graph_break_assertion(phases["graph-break"].get("rc"), breaks, args.dry_run))
    if args.docker:
        for name, ok, detail in docker_assertions(phases, reports, args.dry_run):
            check(name, ok, detail)
    settings = _load(work / "settings.json") or {}
    for side, device, runs, phase, repeat in (
            ("accelerator", args.device, accel, "measure-accel", settings.get("accel_repeat")),
            ("cpu", "cpu", cpu, "measure-cpu", settings.get("cpu_repeat"))):
        got = sum(len(r) for r in runs.values())
        # Every run, and the phase ended by itself: one cut short keeps the runs that finished
        # (measure writes each as it ends), and medians of those would pass for the whole.
        want = len(scenarios) * repeat if isinstance(repeat, int) else None
        rc = phases.get(phase, {}).get("rc")
        bad = [f"{r['scenario']} {r['status']} on {r.get('device')}" for rs in runs.values()
               for r in rs if r.get("status") != "ok" or r.get("device") != device]
        check(f"timing runs, {side} side (--device {device})",
              rc == 0 and got > 0 and got == want and not bad,
              f"exit {rc}, {got} of {want} runs"
              + (f"; not ok or on another device: {', '.join(bad)}" if bad else ""))

    document = {
        "schema": 1,
        "what": "benchmarks/gpu/run.sh: cuda goldens, run-to-run determinism, device fallback "
                "and GPU/CPU timings with --env local",
        "dry_run": args.dry_run,
        "device": args.device,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": _machine(accel, host),
        "settings": settings,
        "phases": phases,
        "record": {"written": (reports["record"] or {}).get("written", []), "verdicts": rec},
        "check": {"rc": chk_rc, "passed": (reports["check"] or {}).get("passed"),
                  "verdicts": chk},
        "fallback": {"rc": phases.get("fallback", {}).get("rc"),
                     "verdicts": verdicts(reports["fallback"])},
        "docker": ({"record": verdicts(reports["docker-record"]),
                    "fallback": verdicts(reports["docker-fallback"]),
                    "stacks": docker_stacks(reports["docker-record"]
                                            or reports["docker-fallback"])}
                   if args.docker else None),
        "scenarios": per_scenario,
        "graph_break": breaks,
        "assertions": assertions,
        "ok": all(a["ok"] for a in assertions),
    }
    write_text(out_dir / "gpu.json", json.dumps(document, indent=1, sort_keys=False) + "\n")
    print(render(document))
    return 0 if document["ok"] else 1


def docker_stacks(report: dict[str, Any] | None) -> dict[str, Any]:
    """image tag -> the accelerator stack its build proved, from the runs' fingerprints."""
    out: dict[str, Any] = {}
    for e in (report or {}).get("evidence", []):
        image = ((e.get("candidate") or {}).get("result", {}).get("fingerprint") or {}).get(
            "image") or {}
        if image.get("stack"):
            out[image["tag"]] = image["stack"]
    return out


def _fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "—"
    if unit == "x":
        return f"×{value:.2f}"
    return f"{value * 1000:.1f}ms" if value < 1 else f"{value:.1f}s"


def render(doc: dict[str, Any]) -> str:
    """The compact end-of-run summary."""
    m = doc["machine"]
    lines = [f"== lockguard GPU run{' (DRY RUN, --device cpu)' if doc['dry_run'] else ''}: "
             f"{m.get('gpu') or m.get('device_name') or 'no GPU'}, driver "
             f"{(m.get('nvidia_driver') or {}).get('driver', '?')}, torch {m.get('torch')} "
             f"(CUDA {m.get('torch_cuda')}, cuDNN {m.get('cudnn')}), jax {m.get('jax')}",
             "phases: " + ", ".join(f"{k} skipped" if v["rc"] is None else
                                    f"{k} {v['rc']} in {v['wall_s']:.0f}s"
                                    for k, v in doc["phases"].items()),
             f"{'scenario':<18} {'record':<16} {'check':<16} {'fallback':<16} "
             f"{'import':>7} {'1st step':>9} {'step':>8} {'step/cpu':>9}  determinism"]
    for sid, s in doc["scenarios"].items():
        rec = doc["record"]["verdicts"].get(sid, {}).get("verdict", "—")
        chk = doc["check"]["verdicts"].get(sid, {})
        fb = doc["fallback"]["verdicts"].get(sid, {}).get("verdict", "—")
        t, r, d = s["accel"], s["accel_over_cpu"], s["determinism"]
        if d.get("bitwise_identical") is None:
            det = f"{d['runs']} ok run(s)"
        elif d["bitwise_identical"]:
            det = f"bitwise x{d['runs']}"
        else:
            loss = d["losses"]
            det = (f"differs: losses from step {loss.get('first_differing')}, max spread "
                   f"{loss.get('max_abs', 0):.3g}; outputs max {d['outputs'].get('max_abs', 0):.3g}")
        lines.append(f"{sid:<18} {rec:<16} {chk.get('verdict', '—'):<16} {fb:<16} "
                     f"{_fmt(t['import_s']):>7} {_fmt(t['first_step_s']):>9} "
                     f"{_fmt(t['step_median_s']):>8} {_fmt(r['step_median_s'], 'x'):>9}  {det}")
    for tag, stack in ((doc.get("docker") or {}).get("stacks") or {}).items():
        lines.append(f"docker {tag}: {stack.get('summary')}")
    for a in doc["assertions"]:
        lines.append(f"{'PASS' if a['ok'] else 'FAIL'} {a['name']}: {a['detail']}")
    lines.append("OK" if doc["ok"] else "NOT OK")
    return "\n".join(lines)


def host_info(args: argparse.Namespace) -> int:
    """Facts about the host that no run reports, for gpu.json's machine section."""
    info: dict[str, Any] = {"python_executable": sys.executable,
                            "python": platform.python_version(), "cores": os.cpu_count()}
    if args.nvidia_smi and Path(args.nvidia_smi).is_file():
        info["nvidia_smi"] = Path(args.nvidia_smi).read_text(errors="replace").strip()
    print(json.dumps(info))
    return 0


def golden_members(names_types: list[tuple[str, str]]) -> list[str]:
    """The golden files in a returned golden.tar.gz, given (name, type) per member; raises
    ValueError for anything but plain relative folders and .json files, or cpu goldens."""
    files = []
    for name, kind in names_types:
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if name.startswith("/") or ".." in parts:
            raise ValueError(f"{name}: not a relative path inside the golden tree")
        if kind == "dir":
            continue
        if kind != "file" or not name.endswith(".json") or len(parts) < 2:
            raise ValueError(f"{name}: expected <device class>/…/<scenario>.json files only")
        if parts[0] == "cpu":
            raise ValueError(f"{name}: a cpu golden; this repo's cpu goldens are recorded here")
        files.append("/".join(parts))
    if not files:
        raise ValueError("no golden files in the archive")
    return files


def collect(args: argparse.Namespace) -> int:
    """Bring a GPU run's returned files into the repo: goldens into golden/, gpu.json into
    benchmarks/results/. Refuses a dry run's results and unexpected archive members."""
    import shutil
    import tarfile

    src, repo = Path(args.files), Path(args.repo)
    doc = _load(src / "gpu.json")
    if not isinstance(doc, dict):
        print(f"error: {src / 'gpu.json'}: missing or not JSON", file=sys.stderr)
        return 2
    if doc.get("dry_run") or doc.get("device") != "cuda":
        print(f"error: {src}: results of a dry run (device {doc.get('device')}), not of a GPU "
              "run; nothing collected", file=sys.stderr)
        return 2
    with tarfile.open(src / "golden.tar.gz") as tar:
        members = tar.getmembers()
        kinds = [(m.name, "dir" if m.isdir() else "file" if m.isfile() else "other")
                 for m in members]
        try:
            files = golden_members(kinds)
        except ValueError as exc:
            print(f"error: {src / 'golden.tar.gz'}: {exc}; nothing collected", file=sys.stderr)
            return 2
        golden = repo / "golden"
        for member in members:
            if member.isfile():
                target = golden / "/".join(p for p in member.name.split("/") if p not in ("", "."))
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as f, open(target, "wb") as out:  # type: ignore
                    shutil.copyfileobj(f, out)
    results = repo / "benchmarks" / "results" / "gpu.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "gpu.json", results)
    print(f"{len(files)} goldens into {golden}: {', '.join(files)}")
    print(f"{results} ({'all assertions held' if doc.get('ok') else 'NOT all assertions held'})")
    return 0


def select_ids(args: argparse.Namespace) -> int:
    """The scenario ids the prefixes select that can run on --device here, one a line (what
    measure runs and summarize expects results for); the ones lockguard's plan skips here
    (the data-parallel ones on a host with one GPU) are said on stderr."""
    from lockguard.config import Options, load_config
    from lockguard.flows.pipeline import on_this_host, plan
    from lockguard.scenarios import select
    from lockguard.settings import Settings

    config = load_config(Path(args.config))
    # Measured on the interpreter as it is (LocalEnv): planned as `--env local` plans.
    settings = Settings.resolve(config, Options(device=args.device, env="local"))
    planned = on_this_host(plan(settings, select(config, args.scenario), []))
    for p in planned:
        if p.skip_reason:
            print(f"not measured on {args.device}: {p.scenario.id}: {p.skip_reason}",
                  file=sys.stderr)
        else:
            print(p.scenario.id)
    return 0 if any(p.skip_reason is None for p in planned) else 2


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--config", required=True)
    m.add_argument("--device", required=True, choices=["cpu", "cuda", "tpu"])
    m.add_argument("--label", required=True, help="subfolder of --out: accel | cpu")
    m.add_argument("--repeat", type=int, default=3)
    m.add_argument("--jobs", type=int, default=4)
    m.add_argument("--steps", type=int)
    m.add_argument("--scenario", action="append", default=[])
    m.add_argument("--out", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("--work", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--device", required=True)
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--docker", action="store_true", help="the docker phases ran (run.sh step 6)")
    h = sub.add_parser("host")
    h.add_argument("--nvidia-smi")
    c = sub.add_parser("select")
    c.add_argument("--config", required=True)
    c.add_argument("--device", required=True, choices=["cpu", "cuda", "tpu"])
    c.add_argument("--scenario", action="append", default=[])
    g = sub.add_parser("graph-break-project")
    g.add_argument("--dir", required=True)
    g.add_argument("--timeout", type=int, required=True)
    k = sub.add_parser("collect")
    k.add_argument("files", help="the folder holding the run's returned files")
    k.add_argument("--repo", default=str(Path(__file__).resolve().parents[2]))
    args = p.parse_args(argv)
    return {"measure": measure, "summarize": summarize, "host": host_info,
            "select": select_ids, "collect": collect,
            "graph-break-project": graph_break_project}[args.command](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
