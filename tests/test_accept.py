"""Evidence kept and changes accepted on purpose: the artefacts of a check, `lockguard accept`,
goldens rewritten only when their reference changed, the golden file model.

The slow tests run the real CLI on the numpy NEP 50 drift (numpy 1.26.4 → 2.0.2) in venvs
lockguard builds (cached); the others need no environment.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, LOSS_EMA, REPO, golden_file, make_project, run_cli, snapshot
from forked_cli import cli_env
from lockguard import golden
from lockguard import evidence
from lockguard.hardware import hardware_class, host_class
from lockguard.harness._lockguard_harness.common import cpu_info
from lockguard.report import load_report
from lockguard.results import RunResult, parse_result

EMA = LOSS_EMA.read_text()
# Crashes under numpy 2 only: the candidate of an A/B from 1.26.4 is broken.
CRASH_ON_2 = '''
import numpy as np


def run(steps, seed):
    if np.__version__.startswith("2."):
        raise RuntimeError("this model does not support numpy 2")
    return {"losses": [1.0 / (1 + s) for s in range(steps)]}
'''


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def ema_repo(root: Path, extra_scenarios: str = "", files: dict[str, str] | None = None) -> Path:
    """The NEP 50 project (new.txt: numpy 2.0.2, old.txt: 1.26.4) as a git repository with
    its own author."""
    project = make_project(root, f"""
        lock = "new.txt"
        scenarios = ["loss_ema"{extra_scenarios}]
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"loss_ema.py": EMA, **(files or {})},
        locks={"new.txt": DATA / "numpy-2.0.2.txt", "old.txt": DATA / "numpy-1.26.4.txt"})
    git(project, "init", "-q", "-b", "main")
    git(project, "config", "user.name", "Ada Lovelace")
    git(project, "config", "user.email", "ada@example.org")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "base")
    return project


def kept_dir(stderr: str) -> Path:
    [line] = [ln for ln in stderr.splitlines() if ln.startswith("artefacts kept in ")]
    return Path(line.removeprefix("artefacts kept in "))


def on_a_terminal(args: list[str], cwd: Path, answer: bytes) -> subprocess.CompletedProcess:
    """`lockguard ARGS` with a terminal on stdin that answers `answer`."""
    leader, follower = pty.openpty()
    env = cli_env()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lockguard", *args], cwd=cwd, env=env,
                                stdin=follower, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        os.write(leader, answer)
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


# --------------------------------------------------------------------- the A/B drift, accepted

@pytest.mark.slow
def test_accept_an_ab_drift_then_check_passes(tmp_path):
    project = ema_repo(tmp_path / "p")
    head = git(project, "rev-parse", "HEAD").strip()
    gdir = project / "golden"

    drift = run_cli("check", "--baseline-lock", "old.txt", cwd=project)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    kept = kept_dir(drift.stderr)

    # The evidence: the report (validated by its reader) and both sides' RunResults.
    report = load_report(kept / "report.json")
    assert report.id == kept.name and report.failing == ["loss_ema"]
    assert report.schema_version == 4 and report.lockguard_version
    [ev] = report.evidence
    for role, lock in (("baseline", "old.txt"), ("candidate", "new.txt")):
        result = parse_result(json.loads((kept / role / "loss_ema.json").read_text()),
                              role)
        assert result == getattr(ev, role).result and len(result.losses) == 20
        assert getattr(ev, role).name == lock
    assert ev.baseline.result.framework_version == "1.26.4"
    assert ev.candidate.result.framework_version == "2.0.2"
    assert ev.candidate.inputs_digest

    # No reason: refused before anything. No terminal and no --yes: the plan, then refused.
    no_reason = run_cli("accept", "--yes", cwd=project)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    assert no_reason.stderr.count("\n") == 1 and no_reason.stdout == ""
    unasked = run_cli("accept", "--reason", "NEP 50", cwd=project)
    assert unasked.returncode == 2, unasked.stdout + unasked.stderr
    assert "--yes" in unasked.stderr and "nothing written" in unasked.stderr
    assert "loss_ema (numpy): drift" in unasked.stdout
    assert "replaces no golden (a new file)" in unasked.stdout
    # On a terminal, the question defaults to no.
    declined = on_a_terminal(["accept", "--reason", "NEP 50"], project, b"n\n")
    assert declined.returncode == 1, declined.stdout + declined.stderr
    assert "Write 1 golden(s)?" in declined.stdout and "nothing written" in declined.stderr
    assert not gdir.exists()

    reason = "numpy 2's NEP 50 promotion is intended (#123)"
    accepted = run_cli("accept", "--reason", reason, "--yes", cwd=project)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    path = golden_file(project, "loss_ema")
    assert f"wrote: golden/cpu/{path.parent.name}/loss_ema.json" in accepted.stderr
    gold = golden.load(path)
    assert gold.result == ev.candidate.result
    provenance = gold.provenance
    assert provenance.acceptance.reason == reason
    assert provenance.acceptance.author == "Ada Lovelace <ada@example.org>"
    assert provenance.acceptance.report_id == report.id
    assert provenance.acceptance.verdict == "drift"
    assert provenance.acceptance.baseline == "old.txt"
    assert provenance.git_commit == head
    [new_lock] = [lock for lock in report.locks if lock.role == "candidate"]
    assert (provenance.lock, provenance.lock_hash) == ("new.txt", new_lock.lock_hash)
    assert provenance.inputs_digest == ev.candidate.inputs_digest

    # The check passes: answered from the accepted golden without a run (its inputs digest is
    # the check's), and, re-run, bitwise identical to it.
    fast = run_cli("check", "--format", "json", cwd=project)
    assert fast.returncode == 0, fast.stdout + fast.stderr
    [v] = json.loads(fast.stdout)["verdicts"]
    assert v["verdict"] == "unchanged" and "not re-run" in v["reasons"][0]
    # It ran nothing, so it keeps nothing, and leaves no pointer to the drift's artefacts:
    # `accept` cannot adopt an older check's runs in its name.
    assert "artefacts kept" not in fast.stderr
    stale = run_cli("accept", "--reason", "again", "--yes", cwd=project)
    assert stale.returncode == 2 and "has kept artefacts" in stale.stderr, stale.stderr
    assert stale.stderr.count("\n") == 1
    rerun = run_cli("check", "--rerun", "--format", "json", cwd=project)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert [v["verdict"] for v in json.loads(rerun.stdout)["verdicts"]] == ["identical"]

    # Nothing left to accept from a check that passed; accepting the same drift again from its
    # artefacts leaves the golden as it is.
    before = path.read_bytes(), path.stat().st_mtime_ns
    idle = run_cli("accept", "--reason", "again", "--yes", cwd=project)
    assert idle.returncode == 0 and "nothing to accept" in idle.stderr, idle.stderr
    again = run_cli("accept", "--from", str(kept), "--reason", "again", "--yes", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "unchanged" in again.stderr
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.mark.slow
def test_accept_refuses_a_crashed_candidate_and_unknown_scenarios(tmp_path):
    project = ema_repo(tmp_path / "p", extra_scenarios=', "fragile"',
                       files={"fragile.py": CRASH_ON_2})
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + (
        '[tool.lockguard.scenario.fragile]\nscript = "fragile.py"\nframework = "numpy"\n'))
    check = run_cli("check", "--baseline-lock", "old.txt", "--format", "json", cwd=project)
    assert check.returncode == 1, check.stdout + check.stderr
    verdicts = {v["scenario"]: v["verdict"] for v in json.loads(check.stdout)["verdicts"]}
    assert verdicts == {"loss_ema": "drift", "fragile": "broken"}
    before = snapshot(project)

    crashed = run_cli("accept", "--reason", "numpy 2", "--yes", cwd=project)
    assert crashed.returncode == 2, crashed.stdout + crashed.stderr
    assert "scenario fragile: its run is crashed" in crashed.stderr
    assert "does not support numpy 2" in crashed.stderr and "nothing written" in crashed.stderr
    assert crashed.stderr.count("\n") == 1
    unknown = run_cli("accept", "--scenario", "nope", "--reason", "x", "--yes", cwd=project)
    assert unknown.returncode == 2 and "--scenario 'nope': not in" in unknown.stderr
    assert snapshot(project) == before

    # Naming only the healthy one adopts it.
    one = run_cli("accept", "--scenario", "loss_ema", "--reason", "numpy 2", "--yes",
                  cwd=project)
    assert one.returncode == 0, one.stdout + one.stderr
    assert golden_file(project, "loss_ema").is_file()
    assert not golden_file(project, "fragile").exists()


# ------------------------------------------------------------------------ record, unchanged

@pytest.mark.slow
def test_record_rewrites_only_goldens_whose_result_changed(tmp_path):
    project = ema_repo(tmp_path / "p")
    first = run_cli("record", "--format", "json", cwd=project)
    assert first.returncode == 0, first.stdout + first.stderr
    path = golden_file(project, "loss_ema")
    assert json.loads(first.stdout)["written"] == [str(path)]
    recorded, mtime = path.read_bytes(), path.stat().st_mtime_ns

    # Same lock, new run: other timings, another commit, same numbers: the file is not touched.
    git(project, "commit", "-q", "--allow-empty", "-m", "later")
    again = run_cli("record", "--format", "json", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert report["written"] == []
    assert "1 of 1 goldens unchanged" in " ".join(report["notes"])
    assert (path.read_bytes(), path.stat().st_mtime_ns) == (recorded, mtime)
    kept = kept_dir(again.stderr)
    assert load_report(kept / "report.json").command == "record"

    # Another lock moves the numbers: rewritten.
    moved = run_cli("record", "--lock", "old.txt", "--format", "json", cwd=project)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert json.loads(moved.stdout)["written"] == [str(path)]
    assert golden.load(path).result.framework_version == "1.26.4"


def gold_result(**fields) -> RunResult:
    base = dict(schema_version=1, scenario="s", framework="numpy", steps=3, device="cpu",
                fingerprint={"cpu": cpu_info()}, losses=[1.0, 0.5, 0.25],
                param_digest="sha256:aa", timings={"total_s": 1.0, "step_median_s": 0.1},
                metrics={"final_ema": 0.25, "run_s": 0.5})
    return RunResult(**{**base, **fields})


def test_write_leaves_a_golden_holding_the_same_reference_untouched(tmp_path):
    res = gold_result()
    cls = hardware_class(res.fingerprint, "cpu")
    path = golden.golden_path(tmp_path, "cpu", cls.id, "s")
    provenance = golden.Provenance(inputs_digest="d", lock_hash="h", git_commit="c1")
    assert golden.write(path, res, provenance, cls) is True
    text, mtime = path.read_text(), path.stat().st_mtime_ns

    # Timings, memory, fingerprint details, commit and recording time are not the reference.
    noise = gold_result(timings={"total_s": 9.0}, peak_memory_bytes=123,
                        metrics={"final_ema": 0.25, "run_s": 2.0},
                        fingerprint={**res.fingerprint, "platform": "elsewhere"})
    assert golden.write(path, noise, provenance.model_copy(update={"git_commit": "c2"}),
                        cls) is False
    assert (path.read_text(), path.stat().st_mtime_ns) == (text, mtime)

    # A loss one float32 ULP away, another parameter digest or metric, other inputs: rewritten.
    for changed, prov in ((gold_result(losses=[1.0, 0.5, 0.25000003]), provenance),
                          (gold_result(param_digest="sha256:bb"), provenance),
                          (gold_result(metrics={"final_ema": 0.5, "run_s": 0.5}), provenance),
                          (res, provenance.model_copy(update={"inputs_digest": "e"}))):
        assert golden.write(path, changed, prov, cls) is True
        gold = golden.load(path)
        assert gold.result == changed and gold.provenance.inputs_digest == prov.inputs_digest
        # Stable JSON: sorted keys, floats as repr writes them, the digest line first.
        assert f"   {changed.losses[-1]!r}\n" in path.read_text()
        assert list(json.loads(path.read_text())) == [
            "digest", "hardware", "provenance", "result", "schema_version"]


def test_every_golden_in_the_repository_reads_through_the_model():
    """The on-disk format of schema 2 as recorded before the model: still read."""
    paths = sorted((REPO / "golden").rglob("*.json"))
    assert paths
    for path in paths:
        gold = golden.load(path)
        assert isinstance(gold.provenance, golden.Provenance)
        assert gold.provenance.inputs_digest and gold.provenance.acceptance is None


def test_a_golden_with_an_unknown_provenance_key_is_refused(tmp_path):
    res = gold_result()
    cls = host_class("cpu")
    path = golden.golden_path(tmp_path, "cpu", cls.id, "s")
    golden.write(path, res, golden.Provenance(inputs_digest="d"), cls)
    document = json.loads(path.read_text())
    document["provenance"]["surprise"] = {"loose": "dict"}
    path.write_text(golden.document_text(document))
    with pytest.raises(golden.GoldenError, match=r"provenance\.surprise"):
        golden.load(path)


# ------------------------------------------------------------------------------- artefacts

def test_an_unwritable_artifacts_dir_is_refused_before_anything_runs(tmp_path):
    project = make_project(tmp_path / "p", 'lock = "l.txt"',
                           locks={"l.txt": DATA / "numpy-2.0.2.txt"})
    (tmp_path / "file").write_text("not a directory")
    before = snapshot(tmp_path)
    cache = tmp_path / "cache"
    proc = run_cli("check", "--scenario", "numpy.mlp", "--artifacts",
                   str(tmp_path / "file" / "out"), cwd=project,
                   env={"LOCKGUARD_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "artefact directory" in proc.stderr and "is not a directory" in proc.stderr
    assert snapshot(tmp_path) == before and not cache.exists()


@pytest.mark.parametrize("where", ["out", "."])
def test_an_artifacts_dir_holding_the_users_files_is_refused_and_kept(tmp_path, where):
    """--artifacts replaces its directory whole: one with files that are not artefacts (the
    report -o just wrote, the project itself) is refused before anything runs."""
    project = make_project(tmp_path / "p", 'lock = "l.txt"',
                           locks={"l.txt": DATA / "numpy-2.0.2.txt"})
    (project / "out").mkdir()
    (project / "out" / "mine.txt").write_text("the user's")
    before = snapshot(project)
    proc = run_cli("check", "--scenario", "numpy.mlp", "--artifacts", where, cwd=project,
                   env={"LOCKGUARD_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "not lockguard artefacts" in proc.stderr
    assert snapshot(project) == before


def test_accept_without_a_check_says_so(tmp_path):
    project = make_project(tmp_path / "p", 'lock = "l.txt"',
                           locks={"l.txt": DATA / "numpy-2.0.2.txt"})
    proc = run_cli("accept", "--reason", "x", "--yes", cwd=project,
                   env={"LOCKGUARD_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2 and "run `lockguard check` first" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_check_that_does_not_finish_leaves_no_last_check(tmp_path):
    """A check kept artefacts; the next one stops with exit 2 after it started (a corrupt
    golden): `accept` must not adopt the earlier check's runs in the later one's name."""
    project = make_project(tmp_path / "p", """
        lock = "l.txt"
        steps = 3
        """, locks={"l.txt": DATA / "numpy-2.2.6.txt"})
    # lockguard's own cache, where the numpy environment is built once (a cache of its own
    # built it again: most of this test's time); the pointer to the last check is the
    # project's, which is this test's alone. numpy 2.2.6 has wheels for every Python the fast
    # subset runs on (3.10-3.13, .github/workflows/ci.yml); 2.0.2 has none for 3.13.
    kept = run_cli("check", "--scenario", "numpy.mlp", "--allow-new", cwd=project)
    assert kept.returncode == 0 and "artefacts kept" in kept.stderr, kept.stderr
    golden = golden_file(project, "numpy.mlp")
    golden.parent.mkdir(parents=True)
    golden.write_text("{not json")
    broken = run_cli("check", "--scenario", "numpy.mlp", cwd=project)
    assert broken.returncode == 2 and "numpy.mlp.json" in broken.stderr, broken.stderr
    proc = run_cli("accept", "--reason", "x", "--yes", cwd=project)
    assert proc.returncode == 2 and "run `lockguard check` first" in proc.stderr, proc.stderr


def test_prune_keeps_the_newest_per_project(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    project = evidence.project_dir(tmp_path / "p")
    ids = [f"202601{day:02d}T120000Z-abcdef" for day in range(1, 26)]
    for name in ids:
        (project / name).mkdir(parents=True)
    (project / "other").mkdir()
    evidence.prune(project, keep=20)
    left = sorted(p.name for p in project.iterdir())
    assert left == sorted(ids[5:] + ["other"])
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", evidence.new_id())


# ------------------------------------------------------- the artefact directory, whole or absent

def two_reports(tmp_path: Path):
    """Two check reports (a drift, then the same check with the candidate crashed) of a
    fake-backend A/B, each with both sides' runs: what `save` writes, twice."""
    from fakes import FakeBackend, lock
    from lockguard.config import parse_config
    from lockguard.flows.ab import check_ab
    from lockguard.scenarios import bundled
    from lockguard.settings import Settings

    settings = Settings.resolve(parse_config({"steps": 4}, "test", tmp_path / "p"))
    old, new = (lock(tmp_path, "old.txt", "numpy==1.26.4\n"),
                lock(tmp_path, "new.txt", "numpy==2.0.2\n"))
    numpy = [s for s in bundled() if s.id == "numpy.mlp"]
    first = check_ab(settings, [new], [old], numpy, backend=FakeBackend())
    crashed = FakeBackend(behaviour={("numpy.mlp", "2.0.2"): "crash"})
    return first, check_ab(settings, [new], [old], numpy, backend=crashed)


def saved(directory: Path, root: Path, report) -> Path:
    from lockguard.report import render

    target = evidence.prepare(directory, root, check=True)
    report.id = target.report_id
    return evidence.save(target, report, render(report, "json"))


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_a_save_that_fails_on_any_file_leaves_the_last_artefacts_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    first, second = two_reports(tmp_path)
    art, root = tmp_path / "art", tmp_path / "p"
    saved(art, root, first)
    before = snapshot(art)
    assert sorted(before) == ["baseline/numpy.mlp.json", "candidate/numpy.mlp.json",
                              "report.json"]
    real = evidence.write_text
    for n in range(1, 5):  # two runs, the report, the ledger's digest: each one failing
        calls = []

        def failing(path, text, n=n, calls=calls):
            calls.append(path)
            if len(calls) == n:
                raise OSError(5, "Input/output error")
            return real(path, text)

        monkeypatch.setattr(evidence, "write_text", failing)
        with pytest.raises(evidence.WriteError, match="cannot write the artefacts"):
            saved(art, root, second)
        assert snapshot(art) == before and leftovers(tmp_path) == [], n
    # The second rename (the new directory into place) failing puts the old one back.
    monkeypatch.setattr(evidence, "write_text", real)
    renames = []
    real_rename = os.rename

    def second_fails(src, dst):
        renames.append(dst)
        if len(renames) == 2:
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", second_fails)
    with pytest.raises(evidence.WriteError):
        saved(art, root, second)
    monkeypatch.setattr(os, "rename", real_rename)
    assert snapshot(art) == before and leftovers(tmp_path) == []
    saved(art, root, second)
    assert snapshot(art) != before and leftovers(tmp_path) == []


KILLED_SAVE = """
import os, signal, sys
sys.path[:0] = [sys.argv[1]]
from pathlib import Path
import lockguard.evidence as evidence
from lockguard.report import load_report, render
where, n = sys.argv[4], int(sys.argv[5])
calls = []
def kill_at_n(real):
    def call(*args):
        calls.append(args)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args)
    return call
if where == "write":
    evidence.write_text = kill_at_n(evidence.write_text)
else:
    os.rename = kill_at_n(os.rename)
report = load_report(Path(sys.argv[3]))
target = evidence.prepare(Path(sys.argv[2]), Path(sys.argv[3]).parent, check=True)
evidence.save(target, report, render(report, "json"))
"""


@pytest.mark.parametrize("where, n", [("write", 1), ("write", 3), ("rename", 1),
                                      ("rename", 2)])
def test_a_save_killed_anywhere_leaves_the_last_artefacts(tmp_path, monkeypatch, where, n):
    """SIGKILL while `save` writes its staging directory, or between the renames that swap it
    in: the last artefacts are what the directory holds once the next run starts, and that run
    leaves no staging or old copy behind."""
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    first, second = two_reports(tmp_path)
    art, root = tmp_path / "art", tmp_path / "p"
    saved(art, root, first)
    before = snapshot(art)
    from lockguard.report import render

    (tmp_path / "second.json").write_text(render(second, "json"))
    proc = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(REPO), str(art),
                           str(tmp_path / "second.json"), where, str(n)],
                          env={**os.environ, "LOCKGUARD_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == -9
    evidence.prepare(art, root, check=True)  # the next run starts
    assert snapshot(art) == before and leftovers(tmp_path) == []
    saved(art, root, second)
    assert snapshot(art) != before and leftovers(tmp_path) == []
