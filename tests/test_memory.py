"""Memory as a verdict, end to end: a dependency upgrade that makes the training heavier.

The harness measures the training's peak host memory as the rise of the resident set above
where it stood after the framework's import (harness common.TrainingMemory). A local package
is built into real wheels (test_compile.py's helpers: reproducible bytes, pinned by hash beside
a real numpy lock); version 2.0 keeps a 96 MiB table alive during the training, version 1.0
does not, and the numerics of both are the same. A/B must call the upgrade `heavier`, naming
both peaks, and gate it where `fail_on` asks; the same lock on both sides must never be.

Nothing here asserts bytes: only ratios with wide margins, and allocations of tens of MiB against
a training that needs a few.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import DATA, lockguard_python
from test_compile import ab, only_change, package_project
from test_harness_torch import harness

pytestmark = pytest.mark.slow

MIB = 1 << 20
NUMPY_LOCK = DATA / "numpy-2.0.2.txt"

LAYER_V1 = """\
    import numpy as np


    def init(n, seed):
        return np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    """

# The same numbers, and a 96 MiB lookup table that the new version precomputes and keeps alive
# for as long as the module lives: written to, so its pages are resident. (Twice the default
# heavier_min_bytes: a rise under it is never judged.)
LAYER_V2 = """\
    import numpy as np

    _TABLES = []


    def init(n, seed):
        _TABLES.append(np.ones(24 << 20, dtype=np.float32))
        return np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    """

SCRIPT = """\
    import numpy as np
    import lg_testlayer


    def run(steps, seed):
        w = lg_testlayer.init(64, seed)
        losses = []
        for _ in range(steps):
            losses.append(float((w.astype(np.float64) ** 2).sum()))
            w = w - np.float32(0.1) * (np.float32(2) * w)
        return {"losses": losses, "params": {"w": w}}
    """

# A plain numpy training that allocates `mib` MiB more than it needs, for the harness tests.
ALLOCATING = """\
    import numpy as np


    def run(steps, seed):
        extra = np.ones({mib} << 18, dtype=np.float32)
        return [float(extra[:8].sum()) + i for i in range(steps)]
    """


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    # `heavier` is gated only where fail_on names it, like `slower`.
    return package_project(
        tmp_path_factory.mktemp("memory") / "p",
        NUMPY_LOCK.read_text(), LAYER_V1, LAYER_V2,
        """
        lock = "v2.txt"
        fail_on = ["drift", "compile_fallback", "device_fallback", "broken", "incomparable",
                   "heavier"]
        [scenario.table]
        script = "train_table.py"
        framework = "numpy"
        steps = 5
        """, {"train_table.py": SCRIPT})


def test_an_upgrade_that_allocates_more_is_heavier(project: Path) -> None:
    code, report = ab(project, "v1.txt", "table")
    [v] = report["verdicts"]
    assert v["verdict"] == "heavier", v["reasons"]
    assert code == 1  # fail_on names heavier
    assert v["param_digest_equal"] is True  # the numbers are the same: only memory moved
    assert v["memory_ratio"] > 4, v["memory_ratio"]  # 96 MiB against a training of a few
    reason = v["reasons"][0]
    assert reason.startswith("the training's peak host memory is ") and "MiB against the" \
        " baseline's " in reason and "(limit 1.20×)" in reason, reason
    change = only_change(report)
    assert (change["name"], change["old_version"], change["new_version"]) == (
        "lg-testlayer", "1.0", "2.0")


def test_the_same_lock_on_both_sides_is_never_heavier(project: Path) -> None:
    # Both sides keep the 96 MiB table: the ratio is the noise of the measure itself.
    code, report = ab(project, "v2.txt", "table")
    [v] = report["verdicts"]
    assert code == 0, v["reasons"]
    assert v["verdict"] == "identical", v["reasons"]
    assert 0.8 < v["memory_ratio"] < 1.25, v["memory_ratio"]


# --------------------------------------------------------------------------------------------
# The harness's measure, in lockguard's numpy venv


@pytest.fixture(scope="module")
def numpy_python() -> Path:
    return lockguard_python(NUMPY_LOCK)


def user_run(python: Path, tmp_path: Path, mib: int) -> dict:
    script = tmp_path / f"alloc{mib}.py"
    script.write_text(textwrap.dedent(ALLOCATING.format(mib=mib)))
    return harness(python, tmp_path, "alloc", 3, "--script", str(script),
                   "--framework", "numpy")


def test_the_measure_is_the_trainings_own(numpy_python: Path, tmp_path: Path) -> None:
    light = user_run(numpy_python, tmp_path, 1)
    heavy = user_run(numpy_python, tmp_path, 64)
    assert light["fingerprint"]["memory_measure"] in ("rss_growth", "maxrss_growth")
    # What the training allocated shows in full, whatever the import took before it.
    assert 56 * MIB < heavy["peak_memory_bytes"] < 96 * MIB, heavy["peak_memory_bytes"]
    # The import of numpy (tens of MiB resident) is not counted: a 1 MiB training is small.
    # (Under either measure: the fallback's, maxrss_growth, counts at most what the training
    # added above the import's peak, never the import itself.)
    assert light["peak_memory_bytes"] < 16 * MIB, light["peak_memory_bytes"]
    assert heavy["peak_memory_bytes"] > 4 * light["peak_memory_bytes"]


def test_bundled_scenario_reports_its_training_peak(numpy_python: Path, tmp_path: Path) -> None:
    r = harness(numpy_python, tmp_path, "numpy.mlp", 4)
    # The training's own arrays (385 KiB measured), never numpy's import (tens of MiB): a
    # peak of 0 would be a measure that saw nothing.
    print("numpy.mlp peak:", r["peak_memory_bytes"])
    assert 0 < r["peak_memory_bytes"] < 16 * MIB, r["peak_memory_bytes"]
    assert r["peak_device_memory_bytes"] is None  # numpy has no device
