"""Culprit bisection end to end: real locks, real venvs, the real CLI.

The harmless bumps are tiny local packages built here as real wheels (as test_compile.py builds
its layer package: `pip wheel` with SOURCE_DATE_EPOCH, so hashes and cached venvs are stable
across runs), served from a find-links folder beside the locks and pinned by hash next to the
real numpy lock of tests/data. A mix of them installs in a second, so a bisection's cost here is
its number of builds, which is what the tests bound.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import DATA, QUICKSTART, make_project, run_cli

pytestmark = pytest.mark.slow

EMA_SCRIPT = (QUICKSTART / "scenarios" / "loss_ema.py").read_text()
EPOCH = {"SOURCE_DATE_EPOCH": "315532800"}


def build_wheel(root: Path, name: str, version: str, source: str, wheels: Path,
                dependencies: tuple[str, ...] = ()) -> Path:
    module = name.replace("-", "_")
    tree = root / f"{name}-{version}"
    (tree / module).mkdir(parents=True, exist_ok=True)
    deps = ", ".join(f'"{d}"' for d in dependencies)
    (tree / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "{version}"
        dependencies = [{deps}]
        """))
    (tree / module / "__init__.py").write_text(textwrap.dedent(source))
    wheels.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", "-w", str(wheels), str(tree)],
        cwd=root, env={**os.environ, **EPOCH}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return next(wheels.glob(f"{module}-{version}-*.whl"))


def pin(name: str, version: str, wheel: Path) -> str:
    return f"{name}=={version} \\\n    --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n"


def locks_with(project: Path, packages: dict[str, dict[str, tuple[str, tuple[str, ...]]]],
               old_base: str, new_base: str) -> None:
    """old.txt / new.txt: a numpy lock plus local packages {name: {"old"|"new": (version,
    (source, deps))}} from the wheels/ folder beside them."""
    wheels = project / "wheels"
    texts = {"old": old_base.rstrip() + "\n\n--find-links wheels\n",
             "new": new_base.rstrip() + "\n\n--find-links wheels\n"}
    for name, sides in packages.items():
        for side, (version, source, deps) in sides.items():
            wheel = build_wheel(project / "build", name, version, source, wheels, deps)
            texts[side] += pin(name, version, wheel)
    for side, text in texts.items():
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
    assert ("drift in loss_ema caused by numpy 1.26.4 → 2.0.2 (the 5 other changes reproduce "
            "the baseline)") in shown.stdout


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
    statuses = {tuple(t["units"]): t["status"] for t in b["trials"]}
    assert statuses.get(("lg-pair-a",)) == "baseline"
    inconsistent = [t for t in b["trials"] if t["status"] == "inconsistent"]
    assert inconsistent and all("lg-pair-b" in t["units"] and "lg-pair-a" not in t["units"]
                                for t in inconsistent)
    assert "lg-pair-b==2.0 requires lg-pair-a>=2.0; the mix pins lg-pair-a==1.0" in \
        inconsistent[0]["reason"]
    assert all(t["build_s"] is None for t in inconsistent)  # skipped, never built
