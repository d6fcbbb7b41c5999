"""Sharding (lockguard/flows/shards.py): the plan, one part per shard, the merge.

The fast tests run the real flows on the fake backend (tests/fakes.py); the acceptance test runs
plan → 3 shards as separate `lockguard` processes → merge on real numpy and torch venvs and
compares the merged Report with an unsharded check of the same project.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import LOSS_EMA, NUMERICS_ONLY, TORCH_LOCK, TORCH_OLD_LOCK, make_project, run_cli
from fakes import FakeBackend, lock
from lockguard.config import Config, ConfigError, Options, parse_config
from lockguard.flows import shards
from lockguard.flows.ab import check_ab
from lockguard.locks.ref import LockRef, read_lock
from lockguard.flows.record import record
from lockguard.names import Verdict
from lockguard.report import Report
from lockguard.scenarios import bundled
from lockguard.flows.check import BaselineLocks, MergeBase, check
from lockguard.settings import Settings

TORCH = [s for s in bundled() if s.framework == "torch"][:4]
NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]
JAX = [s for s in bundled() if s.id == "jax.mlp"]


@pytest.fixture
def project(tmp_path: Path) -> Config:
    return Config(root=tmp_path, golden_dir="golden", steps=6)


def timed_golden(config: Config, scenario: str, seconds: float, hw: str = "x86-a") -> None:
    """A golden file as far as the plan reads one: its recorded total seconds."""
    path = config.root / "golden" / "cpu" / hw / f"{scenario}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"result": {"timings": {"total_s": seconds}}}))


def run_parts(settings: Settings, scenarios, locks, n: int, *, baseline=(),
              backend=None) -> list[tuple[Path, Report]]:
    """What `check --shard K/N` does for every K, in this process."""
    made = shards.make_plan(settings, scenarios, locks, n)
    parts = []
    for k in range(1, n + 1):
        mine = shards.shard_scenarios(made, k, scenarios)
        if mine:
            report = check(settings, locks, mine, BaselineLocks(tuple(baseline)),
                           backend=backend or FakeBackend())
            report.shard = shards.shard_info(made, k)
        else:
            report = shards.empty_report(made, k)
        parts.append((Path(f"part{k}.json"), Report.model_validate_json(report.model_dump_json())))
    return parts


def summary(report: Report) -> tuple:
    return ([(v.scenario, v.verdict, v.reasons) for v in report.verdicts], report.failing,
            report.passed, [e.scenario for e in report.evidence],
            [(lk.path, lk.role) for lk in report.locks])


# ------------------------------------------------------------------------------------ plan

def test_the_plan_is_deterministic_and_names_its_entries(project, tmp_path):
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    one = shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both], 3)
    again = shards.make_plan(Settings.resolve(project), list(TORCH + NUMPY), [both], 3)
    assert one == again and one.digest.startswith("sha256:")
    h = both.lock.lock_hash[:8]
    assert [e.id for e in one.entries] == [f"cpu-numpy-{h}-1of1", f"cpu-torch-{h}-1of2",
                                           f"cpu-torch-{h}-2of2"]
    assert [e.shard for e in one.entries] == ["1/3", "2/3", "3/3"]
    assert sorted(s for e in one.entries for s in e.scenarios) == sorted(
        s.id for s in TORCH + NUMPY)
    assert all(e.runner == "ubuntu-latest" for e in one.entries)
    assert one.entries[0].environments == [f"venv of {both.name} ({both.lock.lock_hash[:12]})"]
    # Another shard count, another plan: its parts must not be merged with these.
    assert shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both],
                            4).digest != one.digest
    # Default: one entry per (device, framework, lock); fewer than that is refused.
    assert shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both]).total == 2
    with pytest.raises(shards.UsageError, match="at least 2"):
        shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both], 1)


def test_a_plan_entry_id_names_its_part_of_the_same_plan(project, tmp_path):
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    entry = shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both], 3).entries[2]
    made = shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both], 3)
    assert shards.entry_index(made, shards.parse_entry(entry.id)) == entry.index == 3
    with pytest.raises(shards.ShardError, match="no such entry in this plan"):
        shards.entry_index(made, entry.id.replace(both.lock.lock_hash[:8], "00000000"))
    for bad in ("cpu-numpy", "cpu-numpy-3of2", "x-0of1"):
        with pytest.raises(shards.UsageError, match="not a plan entry id"):
            shards.parse_entry(bad)


def test_shards_are_balanced_by_recorded_time_not_by_count(project, tmp_path):
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    costs = dict(zip((s.id for s in TORCH), (10.0, 3.0, 3.0, 3.0)))
    for sid, seconds in costs.items():
        timed_golden(project, sid, seconds)
        timed_golden(project, sid, seconds * 3, hw="x86-b")  # another class: the median counts
    timed_golden(project, "numpy.mlp", 1.0)
    made = shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both], 3)
    torch_parts = [e for e in made.entries if e.framework == "torch"]
    assert [e.scenarios for e in torch_parts] == [[TORCH[0].id],
                                                  [s.id for s in TORCH[1:]]]
    assert [e.cost_s for e in torch_parts] == [20.0, 18.0]  # medians of 10|30 and 3|9
    # The spare entries go to the group whose entries are longest: torch, not numpy.
    made = shards.make_plan(Settings.resolve(project), TORCH + NUMPY, [both], 4)
    assert [e.framework for e in made.entries] == ["numpy", "torch", "torch", "torch"]
    # No golden: a per-framework default, never an error.
    (project.root / "golden" / "cpu" / "x86-a" / "numpy.mlp.json").write_text("{not json")
    made = shards.make_plan(Settings.resolve(project), NUMPY, [both], 1)
    assert made.entries[0].cost_s == shards.DEFAULT_COST_S["numpy"]


def test_runner_labels_come_from_config_and_a_missing_one_is_named(project, tmp_path):
    config = parse_config({"runners": {"cuda": ["self-hosted", "gpu"]}}, "pyproject.toml",
                          tmp_path)
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    cuda = Settings.resolve(config, Options(device="cuda"))
    matrix = shards.github_matrix(shards.make_plan(cuda, TORCH, [both], 2))
    assert [e["runner"] for e in matrix["include"]] == [["self-hosted", "gpu"]] * 2
    assert {e["shard"] for e in matrix["include"]} == {"1/2", "2/2"}
    with pytest.raises(shards.ShardError, match=r"runner for device tpu.*runners"):
        shards.github_matrix(shards.make_plan(Settings.resolve(config, Options(device="tpu")),
                                              TORCH, [both]))
    for bad, key in (({"cuda": []}, "runners.cuda"), ({"gpu": "x"}, "runners.gpu"),
                     ({"cpu": " ubuntu"}, "runners.cpu")):
        with pytest.raises(ConfigError, match=key):
            parse_config({"runners": bad}, "pyproject.toml", tmp_path)


# ----------------------------------------------------------------------------------- merge

def test_merged_parts_equal_the_unsharded_ab_check(project, tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\ntorch==2.3.0\n")
    scenarios = TORCH + NUMPY + JAX  # no lock pins jax: skipped, once
    whole = check(Settings.resolve(project), [new], scenarios, BaselineLocks(tuple([old])),
                  backend=FakeBackend())
    fake = FakeBackend()
    parts = run_parts(Settings.resolve(project), scenarios, [new], 3, baseline=[old], backend=fake)
    merged = shards.merge(list(reversed(parts)))  # the order of the files does not matter
    assert summary(merged) == summary(whole)
    assert not merged.passed and merged.failing == ["numpy.mlp"]
    assert [v.verdict for v in merged.verdicts if v.scenario == "jax.mlp"] == [Verdict.skipped]
    assert merged.shard is None
    # Each part ran its own scenarios only, and none shows another part's as a verdict.
    for _, part in parts:
        assert {v.scenario for v in part.verdicts} == set(part.shard.scenarios)
    assert sorted(fake.runs) == sorted(whole_runs(project, [new], [old], scenarios))


def whole_runs(config, locks, baseline, scenarios):
    fake = FakeBackend()
    check(Settings.resolve(config), locks, scenarios, BaselineLocks(tuple(baseline)), backend=fake)
    return fake.runs


def test_merged_parts_equal_the_unsharded_golden_check(project, tmp_path):
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    assert record(Settings.resolve(project), [both], TORCH + NUMPY, backend=FakeBackend()).passed
    whole = check(Settings.resolve(project, Options(rerun=True)), [both], TORCH + NUMPY,
                  backend=FakeBackend())
    parts = run_parts(Settings.resolve(project, Options(rerun=True)), TORCH + NUMPY, [both], 5)
    merged = shards.merge(parts)
    assert summary(merged) == summary(whole) and merged.passed
    assert merged.hardware == whole.hardware


def test_more_shards_than_scenarios_leaves_empty_parts_that_pass(project, tmp_path):
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\n")
    made = shards.make_plan(Settings.resolve(project), NUMPY, [both], 3)
    assert [e.scenarios for e in made.entries] == [["numpy.mlp"], [], []]
    assert [e.id for e in made.entries][1:] == ["empty-1of2", "empty-2of2"]
    parts = run_parts(Settings.resolve(project), NUMPY, [both], 3, baseline=[both])
    assert parts[1][1].passed and parts[1][1].verdicts == []
    merged = shards.merge(parts)
    assert [v.scenario for v in merged.verdicts] == ["numpy.mlp"] and merged.passed


def test_a_plan_with_nothing_runnable_fails_after_merging(project, tmp_path):
    numpy_only = lock(tmp_path, "lock.txt", "numpy==1.26.4\n")
    parts = run_parts(Settings.resolve(project), JAX, [numpy_only], 2, baseline=[numpy_only])
    merged = shards.merge(parts)
    assert not merged.passed
    assert merged.notes[0].startswith("nothing was compared")
    assert [v.verdict for v in merged.verdicts] == [Verdict.skipped]


def test_merge_refuses_missing_duplicate_and_foreign_parts(project, tmp_path):
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    parts = run_parts(Settings.resolve(project), TORCH + NUMPY, [both], 3, baseline=[both])
    with pytest.raises(shards.ShardError, match=r"shard 2/3 missing \(given: 1, 3\)"):
        shards.merge([parts[0], parts[2]])
    with pytest.raises(shards.ShardError, match=r"shard 3/3 given twice: part3.json and x.json"):
        shards.merge(parts + [(Path("x.json"), parts[2][1])])
    other = run_parts(Settings.resolve(project), TORCH + NUMPY, [both], 4, baseline=[both])
    with pytest.raises(shards.ShardError, match=r"part2.json: shard 2/4 of another plan"):
        shards.merge([parts[0], other[1]])
    # Same N, another scenario selection: another digest.
    fewer = run_parts(Settings.resolve(project), TORCH[:3] + NUMPY, [both], 3, baseline=[both])
    with pytest.raises(shards.ShardError, match="of another plan"):
        shards.merge([parts[0], parts[1], fewer[2]])
    unsharded = check(Settings.resolve(project), [both], NUMPY, BaselineLocks(tuple([both])),
                      backend=FakeBackend())
    with pytest.raises(shards.ShardError, match="u.json: not a shard's report"):
        shards.merge(parts + [(Path("u.json"), unsharded)])
    with pytest.raises(shards.ShardError, match="no partial report"):
        shards.merge([])


def test_parity_of_a_family_split_over_shards_is_rebuilt(project, tmp_path):
    both = lock(tmp_path, "lock.txt", "numpy==1.26.4\ntorch==2.3.0\n")
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\ntorch==2.2.0\n")
    mlp = [s for s in bundled() if s.id in ("torch.mlp", "numpy.mlp")]
    whole = check_ab(Settings.resolve(project), [both], [old], mlp, backend=FakeBackend())
    merged = shards.merge(run_parts(Settings.resolve(project), mlp, [both], 2, baseline=[old]))
    assert [(r.family, sorted(r.step0)) for r in merged.parity] == \
        [(r.family, sorted(r.step0)) for r in whole.parity] == [("mlp", ["numpy.mlp",
                                                                          "torch.mlp"])]


# ------------------------------------------------------------- real processes, real venvs

def torch_numpy_project(root: Path) -> Path:
    """A torch project whose numpy moves 1.26 → 2.0 (torch.mlp, torch.lm and a float32 metric
    that NEP 50 changes, judged exactly), with `slower` and `heavier` out of reach: shards
    running side by side must not turn timing or memory into a verdict."""
    return make_project(root, NUMERICS_ONLY + """
        lock = "requirements.txt"
        scenarios = ["torch.mlp", "torch.lm", "loss_ema"]
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"loss_ema.py": LOSS_EMA.read_text()},
        locks={"requirements.txt": TORCH_LOCK, "requirements-old.txt": TORCH_OLD_LOCK})


@pytest.mark.slow
def test_plan_three_shard_processes_and_merge_equal_the_unsharded_run(tmp_path):
    root = torch_numpy_project(tmp_path / "q")
    ab = ("--baseline-lock", "requirements-old.txt")
    env = {"LOCKGUARD_JOBS": "1"}
    planned = run_cli("plan", "--shards", "3", "--format", "json", cwd=root)
    assert planned.returncode == 0, planned.stderr
    made = json.loads(planned.stdout)
    assert [len(e["scenarios"]) for e in made["entries"]] == [1, 1, 1]

    def shard(k: int):
        # Part 2 is named by its plan entry id, as a matrix job can: the same part.
        part = (("--plan-entry", made["entries"][1]["id"], "--shards", "3") if k == 2
                else ("--shard", f"{k}/3"))
        return run_cli("check", *ab, *part, "--format", "json",
                       "-o", f"part{k}.json", cwd=root, env=env)

    with ThreadPoolExecutor(3) as pool:
        parts = list(pool.map(shard, (1, 2, 3)))
    whole = run_cli("check", *ab, "--format", "json", "-o", "whole.json", cwd=root, env=env)
    merged = run_cli("merge", "part1.json", "part2.json", "part3.json", "--format", "json",
                     "-o", "merged.json", "--report", "markdown=merged.md", cwd=root)

    assert whole.returncode == 1, whole.stderr  # loss_ema drifts under NEP 50, bit-exact
    assert [p.returncode for p in parts] == [1, 0, 0], [p.stderr for p in parts]
    assert merged.returncode == whole.returncode, merged.stderr
    w = json.loads((root / "whole.json").read_text())
    m = json.loads((root / "merged.json").read_text())
    # Measured, never equal between runs: timing and memory ratios.
    timing = ("step_time_ratio", "first_step_ratio", "memory_ratio", "device_memory_ratio")
    assert [{k: x for k, x in v.items() if k not in timing} for v in m["verdicts"]] == \
        [{k: x for k, x in v.items() if k not in timing} for v in w["verdicts"]]
    assert [v["scenario"] for v in m["verdicts"]] == ["torch.mlp", "torch.lm", "loss_ema"]
    assert (m["failing"], m["passed"]) == (w["failing"], w["passed"]) == (["loss_ema"], False)
    assert m["shard"] is None and "loss_ema" in (root / "merged.md").read_text()
    for k in (1, 2, 3):
        part = json.loads((root / f"part{k}.json").read_text())
        assert part["shard"]["index"] == k
        assert [v["scenario"] for v in part["verdicts"]] == made["entries"][k - 1]["scenarios"]

    missing = run_cli("merge", "part1.json", "part3.json", cwd=root)
    assert missing.returncode == 2 and "shard 2/3 missing" in missing.stderr
    twice = run_cli("merge", "part1.json", "part2.json", "part3.json", "part2.json", cwd=root)
    assert twice.returncode == 2 and "part2.json: given twice" in twice.stderr
    shutil.copy(root / "part2.json", root / "copy.json")
    dup = run_cli("merge", "part1.json", "part2.json", "part3.json", "copy.json", cwd=root)
    assert dup.returncode == 2 and "shard 2/3 given twice: part2.json and copy.json" in dup.stderr
    assert not (root / "nothing.json").exists()


def git_project(tmp_path: Path) -> tuple[Config, list[LockRef]]:
    """A git work tree with two locks committed: a.txt pins numpy, b.txt torch."""
    import subprocess

    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("numpy==1.26.4\n")
    (root / "b.txt").write_text("torch==2.3.0\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "locks"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    config = Config(root=root, golden_dir="golden", steps=6)
    return config, [LockRef(root / n, read_lock(root / n)) for n in ("a.txt", "b.txt")]


def base_parts(config: Config, refs: list[LockRef], scenarios) -> list[tuple[Path, Report]]:
    """`check --base main --shard K/N` for every K, in this process."""
    from lockguard.flows.git_base import check_base, open_gate

    made = shards.make_plan(Settings.resolve(config), scenarios, refs, None)
    parts = []
    for k in range(1, made.total + 1):
        mine = shards.shard_scenarios(made, k, scenarios)
        gate = open_gate(config, "main", [str(r.path) for r in refs])
        report = check(Settings.resolve(gate.judging), [], mine, MergeBase(gate),
                       backend=FakeBackend())
        report.shard = shards.shard_info(made, k)
        parts.append((Path(f"part{k}.json"), Report.model_validate_json(report.model_dump_json())))
    return parts


def test_sharded_base_checks_pass_as_the_unsharded_one_when_locks_did_not_move(tmp_path):
    from lockguard.flows.git_base import check_base, open_gate

    config, refs = git_project(tmp_path)
    scenarios = NUMPY + TORCH[:1]
    gate = open_gate(config, "main", [str(r.path) for r in refs])
    whole = check_base(Settings.resolve(gate.judging), gate, scenarios, backend=FakeBackend())
    assert whole.passed and whole.verdicts == []  # answered from git alone
    merged = shards.merge(base_parts(config, refs, scenarios))
    assert merged.passed and merged.verdicts == []

    # One lock moved (a harmless addition): the other lock's part compares nothing, which
    # must not fail the merged gate when the unsharded check passes.
    (config.root / "a.txt").write_text("numpy==1.26.4\nsix==1.16.0\n")
    refs = [LockRef(r.path, read_lock(r.path)) for r in refs]
    gate = open_gate(config, "main", [str(r.path) for r in refs])
    whole = check_base(Settings.resolve(gate.judging), gate, scenarios, backend=FakeBackend())
    assert whole.passed and [v.verdict for v in whole.verdicts] == [Verdict.identical]
    parts = base_parts(config, refs, scenarios)
    assert [p.passed for _, p in parts] == [True, False]  # the torch part: nothing compared
    merged = shards.merge(parts)
    assert merged.passed and [v.scenario for v in merged.verdicts] == ["numpy.mlp"]
    # The order parts are given in does not matter.
    assert shards.merge(list(reversed(parts))).passed


def test_merge_does_not_depend_on_the_order_of_an_empty_part(project, tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    parts = run_parts(Settings.resolve(project), NUMPY, [new], 3, baseline=[old])
    assert parts[0][1].mode == "ab" and parts[1][1].mode == "golden"  # an empty part
    assert shards.merge(parts).failing == shards.merge(list(reversed(parts))).failing
