"""Culprit bisection end to end: real locks, real venvs, the real CLI.

The harmless bumps are tiny local packages written here as real wheels (conftest.build_wheels,
with fixed timestamps, so hashes and cached venvs are stable across runs), served from a
find-links folder beside the locks and pinned by hash next to the real numpy lock of tests/data.
A mix of them installs in a second, so a bisection's cost here is its number of builds, which is
what the tests bound; the torch mixes share one compile cache (their torch is pinned alike), so
only the first of them compiles cold.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import DATA, LOSS_EMA, TORCH_LOCK, build_wheels, make_project, run_cli
from lockguard.report import Report, render

pytestmark = pytest.mark.slow

EMA_SCRIPT = LOSS_EMA.read_text()


def pin(name: str, version: str, wheel: Path) -> str:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f"{name}=={version} \\\n    --hash=sha256:{digest}\n"


def locks_with(project: Path, packages: dict[str, dict[str, tuple[str, str, tuple[str, ...]]]],
               old_base: str, new_base: str, modules: dict[str, str] | None = None) -> None:
    """old.txt / new.txt: a base lock plus local packages {name: {"old"|"new": (version,
    source, deps)}} from the wheels/ folder beside them (`modules`: a package's module name
    where it is not the distribution's)."""
    wheels = project / "wheels"
    for side, base in (("old", old_base), ("new", new_base)):
        wanted = {name: (*sides[side], (modules or {}).get(name))
                  for name, sides in packages.items() if side in sides}
        built = build_wheels(wanted, wheels)
        text = base.rstrip() + "\n\n--find-links wheels\n" + "".join(
            pin(name, wanted[name][0], wheel) for name, wheel in built.items())
        (project / f"{side}.txt").write_text(text)


def harmless(n: int) -> dict:
    """n packages that only change a version string between the locks."""
    return {f"lg-harmless-{i}": {"old": ("1.0", "VERSION = '1.0'\n", ()),
                                 "new": ("1.1", "VERSION = '1.1'\n", ())} for i in range(n)}


def bisect_json(project: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = run_cli("bisect", "--baseline-lock", "old.txt", "--format", "json", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc, json.loads(proc.stdout)


def test_numpy_nep50_is_found_among_harmless_bumps(tmp_path):
    project = make_project(tmp_path / "p", """
        lock = "new.txt"
        scenarios = ["loss_ema"]
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"loss_ema.py": EMA_SCRIPT})
    locks_with(project, harmless(5), (DATA / "numpy-1.26.4.txt").read_text(),
               (DATA / "numpy-2.0.2.txt").read_text())
    _, report = bisect_json(project)
    [verdict] = report["verdicts"]
    assert verdict["verdict"] == "drift"
    [b] = report["bisection"]
    assert b["culprit"] == ["numpy 1.26.4 → 2.0.2"] and b["found"]
    assert len(b["units"]) == 6 and b["others"] == 5
    assert 1 <= b["builds"] <= math.ceil(math.log2(6)) + 2 == b["bound"]
    for trial in b["trials"]:
        assert trial["status"] == ("reproduces" if "numpy" in trial["units"] else "baseline")
        assert trial["build_s"] is not None and trial["run_s"] is not None
    new_text = (project / "new.txt").read_text().splitlines()
    numpy_line = next(i for i, line in enumerate(new_text, 1) if line.startswith("numpy=="))
    assert b["culprit_lines"] == [numpy_line]
    # The sentence, in the text format, as the issue words it.
    shown = run_cli("bisect", "--baseline-lock", "old.txt", cwd=project)
    assert shown.returncode == 1
    # (words, not lines: the text wraps at the terminal's width, which differs under xdist)
    assert ("drift in loss_ema caused by numpy 1.26.4 → 2.0.2 (the 5 other changes reproduce "
            "the baseline)") in " ".join(shown.stdout.split()), shown.stdout


PAIR_A_OLD = "FAST = False\n"
PAIR_A_NEW = "FAST = True  # 2.0 ships a float32 fast path\n"
PAIR_B = """\
    import numpy as np

    import lg_pair_a


    def smooth(ema, raw):
        # 2.0 takes a's fast path when a offers one: float32 throughout
        if {use_fast} and lg_pair_a.FAST:
            return np.float32(ema * np.float32(0.9) + np.float32(0.1) * raw)
        return float(ema) * 0.9 + 0.1 * float(raw)
    """
PAIR_SCRIPT = """\
import math

import numpy as np

import lg_pair_b


def run(steps, seed):
    ema = 0.0
    losses = []
    for step in range(steps):
        raw = np.float32(2.0 * math.exp(-0.05 * step) + 0.01 * math.sin(step + seed))
        ema = lg_pair_b.smooth(ema, raw)
        losses.append(float(ema))
    return {"losses": losses}
"""


def test_two_packages_needed_together_are_found_as_the_pair(tmp_path):
    """lg-pair-b 2.0 uses a fast path lg-pair-a 2.0 adds and requires it: a alone changes
    nothing, b alone cannot be installed (skipped as inconsistent), both drift."""
    project = make_project(tmp_path / "p", """
        lock = "new.txt"
        scenarios = ["pair"]
        [scenario.pair]
        script = "pair.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"pair.py": PAIR_SCRIPT})
    numpy = (DATA / "numpy-2.0.2.txt").read_text()
    packages = {**harmless(4),
                "lg-pair-a": {"old": ("1.0", PAIR_A_OLD, ()), "new": ("2.0", PAIR_A_NEW, ())},
                "lg-pair-b": {"old": ("1.0", PAIR_B.format(use_fast=False), ("lg-pair-a",)),
                              "new": ("2.0", PAIR_B.format(use_fast=True),
                                      ("lg-pair-a>=2.0",))}}
    locks_with(project, packages, numpy, numpy)
    _, report = bisect_json(project)
    [b] = report["bisection"]
    assert report["verdicts"][0]["verdict"] == "drift"
    assert sorted(b["culprit"]) == ["lg-pair-a 1.0 → 2.0", "lg-pair-b 1.0 → 2.0"]
    assert b["found"] and b["others"] == 4 and b["strategy"] == "ddmin"
    # Found as the pair, and said to be inseparable, with the constraint that ties them.
    assert b["confidence"] == "implicated"
    assert "lg-pair-b==2.0 requires lg-pair-a>=2.0" in b["sureness"]
    statuses = {tuple(t["units"]): t["status"] for t in b["trials"]}
    assert statuses.get(("lg-pair-a",)) == "baseline"
    inconsistent = [t for t in b["trials"] if t["status"] == "inconsistent"]
    assert inconsistent and all("lg-pair-b" in t["units"] and "lg-pair-a" not in t["units"]
                                for t in inconsistent)
    assert "lg-pair-b==2.0 requires lg-pair-a>=2.0; the mix pins lg-pair-a==1.0" in \
        inconsistent[0]["reason"]
    assert all(t["build_s"] is None for t in inconsistent)  # skipped, never built


# --------------------------------------------------------------------------------------------
# torch: a graph break among harmless bumps and a torch-family move, on the torch test lock

CULPRIT = "vendored-testlayer"  # test_compile's lg_testlayer module, under another name
FAMILY_STUB = "# a stand-in: nothing imports this module, only its distribution name counts\n"


def graph_break_project(root: Path, backend: str = "inductor") -> Path:
    """The project of the test below, and of benchmarks/bench_bisect.py's compile mode (which
    measures inductor's compile time too; the test compiles with the `eager` backend: Dynamo
    breaks the graph before a backend runs, so the verdicts are the same: 28 s against 94 s
    for the test, warm, on 2 cores)."""
    from test_compile import MODULE, TORCH_SCRIPT, TORCH_V1, TORCH_V2

    script = textwrap.dedent(TORCH_SCRIPT)
    if backend != "inductor":
        script = script.replace("torch.compile(model)",
                                f"torch.compile(model, backend={backend!r})")
        assert backend in script

    project = make_project(root, """
        lock = "new.txt"
        scenarios = ["layer"]
        [scenario.layer]
        script = "train_layer.py"
        framework = "torch"
        steps = 2
        """, files={"train_layer.py": script})
    family = {name: {"old": (f"{v}.0+cpu", FAMILY_STUB, ()), "new": (f"{v}.1+cpu", FAMILY_STUB, ())}
              for name, v in (("torchaudio", "2.13"), ("torchvision", "0.28"))}
    # Units are searched in name order, and named here so that the first half holds two
    # harmless bumps and the family (a mix that must come out as the baseline) and the second
    # half starts with the culprit: two mixes, one of each verdict.
    packages = {**harmless(2), **family,
                CULPRIT: {"old": ("1.0", TORCH_V1, ()), "new": ("2.0", TORCH_V2, ())},
                **{f"zz-harmless-{i}": {"old": ("1.0", "VERSION = '1.0'\n", ()),
                                        "new": ("1.1", "VERSION = '1.1'\n", ())}
                   for i in range(2)}}
    torch_lock = TORCH_LOCK.read_text()
    locks_with(project, packages, torch_lock, torch_lock, modules={
        CULPRIT: MODULE, "torchaudio": "lg_stub_torchaudio", "torchvision": "lg_stub_torchvision"})
    return project


def test_torch_graph_break_is_found_and_the_family_moves_as_one(tmp_path):
    """The compile tests' layer package (2.0 adds a `.item()` graph break) among harmless local
    bumps and a torch-family move on the real torch lock. The family move is torchvision and
    torchaudio bumping a patch release as stand-in wheels (distribution names and versions that
    pass the torch family rules, modules under other names, so torch never imports them): a
    real torchvision build of another release is not to be had offline, and the grouping looks
    at distribution names only."""
    project = graph_break_project(tmp_path / "p", backend="eager")
    _, report = bisect_json(project)
    [verdict] = report["verdicts"]
    assert verdict["verdict"] == "compile_fallback", verdict["reasons"]
    [b] = report["bisection"]
    assert b["verdict"] == "compile_fallback" and b["found"], b
    assert b["culprit"] == [f"{CULPRIT} 1.0 → 2.0"] and b["culprit_units"] == [CULPRIT]
    assert b["units"] == ["lg-harmless-0", "lg-harmless-1", "torch family", CULPRIT,
                          "zz-harmless-0", "zz-harmless-1"]
    assert b["others"] == 6  # seven changed packages in six units
    assert 1 <= b["builds"] <= math.ceil(math.log2(6)) + 2 == b["bound"]
    new_text = (project / "new.txt").read_text().splitlines()
    layer_line = next(i for i, line in enumerate(new_text, 1) if line.startswith(f"{CULPRIT}=="))
    assert b["culprit_lines"] == [layer_line]
    family_changes = {"torchaudio 2.13.0+cpu → 2.13.1+cpu",
                      "torchvision 0.28.0+cpu → 0.28.1+cpu"}
    moved = []
    for trial in b["trials"]:
        # The mix reproduces exactly when it holds the layer package, and judged like the
        # check: the harmless mixes compile as cleanly as the baseline.
        assert trial["status"] == ("reproduces" if CULPRIT in trial["units"] else "baseline"), \
            trial
        if trial["status"] == "reproduces":
            assert trial["verdict"] == "compile_fallback", trial
        # The family moves whole or not at all.
        present = family_changes & set(trial["changes"])
        assert present in (set(), family_changes), trial
        moved.append(bool(present) == ("torch family" in trial["units"]))
        if present:
            mix = Path(trial["lock"]) if Path(trial["lock"]).is_absolute() else \
                project / trial["lock"]
            text = mix.read_text()
            assert "torchaudio==2.13.1+cpu" in text and "torchvision==0.28.1+cpu" in text
    assert all(moved) and any("torch family" in t["units"] for t in b["trials"])
    assert any(t["status"] == "baseline" for t in b["trials"])
    # The sentence, in the text format of the same report (wrapped to the terminal's width).
    text = " ".join(render(Report.model_validate(report), "text").split())
    assert (f"compile_fallback in layer caused by {CULPRIT} 1.0 → 2.0 (the 6 other changes "
            "reproduce the baseline)") in text


def coupled_project(root: Path) -> Path:
    """The coupled case: jax.rng and the NEP 50 scenario on jax 0.4.35 → 0.5.0 with numpy
    1.26.4 → 2.0.2 and ml-dtypes along (old.txt → new.txt)."""
    return make_project(root, """
        lock = "new.txt"
        scenarios = ["jax.rng", "loss_ema"]
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"loss_ema.py": EMA_SCRIPT},
        locks={"old.txt": DATA / "jax-0.4.35-numpy-1.26.4.txt",
               "new.txt": DATA / "jax-0.5.0-numpy-2.0.2.txt"})


def test_coupled_jax_and_numpy_are_told_apart_by_repairing_the_mix(tmp_path):
    """jax 0.4.35 → 0.5.0 (jaxlib with it) and numpy 1.26.4 → 2.0.2, ml-dtypes 0.5.4 → 0.7.0
    along, as a resolver gives them: jax.rng drifts with jax 0.5.0's random streams, loss_ema
    with numpy 2's NEP 50. The jax family's mix pins ml-dtypes 0.7.0, which requires numpy 2: it
    is repaired (ml-dtypes kept at 0.5.4, which jax 0.5.0 accepts), so jax.rng's culprit is the
    jax family alone, numpy never named; loss_ema's is numpy. Both isolated."""
    _, report = bisect_json(coupled_project(tmp_path / "p"))
    verdicts = {v["scenario"]: v["verdict"] for v in report["verdicts"]}
    assert verdicts == {"jax.rng": "drift", "loss_ema": "drift"}, report["verdicts"]
    found = {b["scenario"]: b for b in report["bisection"]}
    rng = found["jax.rng"]
    assert rng["culprit_units"] == ["jax family"] and rng["found"], rng
    assert rng["culprit"] == ["jax 0.4.35 → 0.5.0", "jaxlib 0.4.35 → 0.5.0"]  # no numpy,
    # nor ml-dtypes, which the mix that reproduced it kept at 0.5.4
    assert rng["confidence"] == "isolated"
    [repaired] = [t for t in rng["trials"] if t["kept"]]
    assert repaired["status"] == "reproduces"
    assert repaired["kept"][0].startswith("ml-dtypes kept at 0.5.4 (ml-dtypes==0.7.0 requires "
                                          "numpy>=2")
    assert rng["builds"] <= rng["bound"]
    ema = found["loss_ema"]
    assert ema["culprit"] == ["numpy 1.26.4 → 2.0.2"] and ema["confidence"] == "isolated"


def test_a_family_that_cannot_run_apart_is_implicated_with_its_constraint(tmp_path):
    """jax 0.4.35 → 0.5.0 with numpy 1.24.4 → 2.0.2: jax 0.5.0 requires numpy>=1.25, and no
    package of the jax family can be kept back to allow 1.24.4 (jax itself is the framework),
    so the jax family is never run without numpy. jax.rng's drift is named with numpy as
    implicated, with the constraint; never as an isolated culprit."""
    project = make_project(tmp_path / "p", """
        lock = "new.txt"
        scenarios = ["jax.rng"]
        """, locks={"old.txt": DATA / "jax-0.4.35-numpy-1.24.4.txt",
                    "new.txt": DATA / "jax-0.5.0-numpy-2.0.2-scipy-1.13.1.txt"})
    _, report = bisect_json(project)
    [b] = report["bisection"]
    assert b["confidence"] == "implicated", b
    assert "requires numpy>=1.25" in b["sureness"] and "numpy==1.24.4" in b["sureness"]
    assert sorted(b["culprit_units"]) == ["jax family", "numpy"]
    skipped = [t for t in b["trials"] if t["status"] == "inconsistent"]
    assert skipped and all(t["units"] == ["jax family"] for t in skipped)
    assert not any(t["kept"] for t in b["trials"])
