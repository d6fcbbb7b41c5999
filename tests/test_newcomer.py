"""The newcomer's afternoon (../shared/reviews/newcomer-3.md), replayed with the real frameworks:
a torch project adds lockguard with `init --yes`, a numpy patch PR is gated (the compiled and
data-parallel runs left out, said so), the intended drift it brings is accepted on the PR and the
gate passes; a uv project's uv.lock and the pylock.toml exported from it move together (checked)
and apart (the stale one named with its command); `propose` with a range the lock satisfies
builds nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, NUMERICS_ONLY, TORCH_LOCK, TORCH_OLD_LOCK, run_cli
from test_accept import git

pytestmark = pytest.mark.slow


def commit(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


def repository(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Newcomer")
    git(root, "config", "user.email", "newcomer@example.org")
    commit(root, "the project")
    return root


def gate(root: Path) -> tuple[int, dict, str]:
    report = root.parent / f"{root.name}-report.json"
    proc = run_cli("check", "--base", "main", "--report", f"json={report}", cwd=root)
    data = json.loads(report.read_text()) if report.is_file() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def test_a_torch_project_from_init_to_an_accepted_numpy_pr(tmp_path):
    root = repository(tmp_path / "torch-project", {
        "requirements.txt": TORCH_OLD_LOCK.read_text(),  # torch 2.13.0, numpy 1.26.4
        "requirements.in": "torch==2.13.0\nnumpy\n",  # what it was compiled from
        "pyproject.toml": '[project]\nname = "newcomer"\nversion = "0.1"\n'})
    done = run_cli("init", "--yes", "--no-record", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (root / "pyproject.toml").read_text()
    assert "[tool.lockguard]" in text and (root / ".github/workflows/lockguard.yml").is_file()
    # The budget's advice taken: a few scenarios, a compiled and a data-parallel one among them.
    # And their own scenario: the loss EMA their training logs (numpy; NEP 50 moves it).
    selected = '"torch.mlp", "torch.mlp.compile", "torch.ddp", "numpy.mlp", "loss_ema"'
    head, _, rest = text.partition("\nscenarios = [")
    text = (head + f"\nscenarios = [{selected}]\n" + NUMERICS_ONLY.rstrip()
            + rest[rest.index("]") + 1:] + '\n[tool.lockguard.scenario.loss_ema]\n'
            'script = "scenarios/loss_ema.py"\nframework = "numpy"\ntolerance = "exact"\n')
    (root / "pyproject.toml").write_text(text)
    (root / "scenarios").mkdir()
    shutil.copy(DATA / "loss_ema.py", root / "scenarios" / "loss_ema.py")
    commit(root, "Add lockguard")
    git(root, "checkout", "-qb", "numpy-2")
    shutil.copy(TORCH_LOCK, root / "requirements.txt")  # numpy 1.26.4 → 2.0.2
    commit(root, "numpy 2")

    code, report, said = gate(root)
    verdicts = {v["scenario"]: v for v in report["verdicts"]}
    assert code == 1 and report["failing"] == ["loss_ema"], said
    assert verdicts["loss_ema"]["verdict"] == "drift"  # NEP 50
    for left_out in ("torch.mlp.compile", "torch.ddp"):
        assert verdicts[left_out]["verdict"] == "skipped"
        assert verdicts[left_out]["reasons"][0].startswith("not run: no ")
    assert verdicts["torch.mlp"]["verdict"] not in ("skipped", "broken")
    assert "torch.mlp.compile, " in said or "torch.mlp.compile not run" in said

    accepted = run_cli("accept", "--reason", "numpy 2: NEP 50 promotion", "--yes", cwd=root)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    commit(root, "Accept numpy 2's drift")
    code, report, said = gate(root)
    assert code == 0 and report["passed"], said
    [ema] = [v for v in report["verdicts"] if v["scenario"] == "loss_ema"]
    assert ema["accepted"]["reason"] == "numpy 2: NEP 50 promotion"

    # A range the lock already satisfies: nothing to build, nothing to propose.
    proposed = run_cli("propose", "numpy>=2,<2.1", cwd=root)
    assert proposed.returncode == 0, proposed.stdout + proposed.stderr
    assert "already satisfied" in proposed.stdout + proposed.stderr


def uv(root: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "uv", *args], cwd=root, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


def test_a_uv_project_whose_lock_and_export_move_together_and_apart(tmp_path):
    pyproject = ('[project]\nname = "uvp"\nversion = "0.1"\nrequires-python = ">=3.11,<3.12"\n'
                 'dependencies = ["numpy==2.0.1"]\n\n[tool.lockguard]\n'
                 'locks = ["uv.lock", "pylock.toml"]\nscenarios = ["numpy.mlp"]\n'
                 + NUMERICS_ONLY)
    root = repository(tmp_path / "uv-project", {"pyproject.toml": pyproject})
    export = ("export", "--format", "pylock.toml", "--no-emit-project", "-o", "pylock.toml",
              "--quiet")
    uv(root, "lock", "--quiet")
    uv(root, *export)
    commit(root, "locks")
    git(root, "checkout", "-qb", "numpy-patch")
    (root / "pyproject.toml").write_text(pyproject.replace("2.0.1", "2.0.2"))
    uv(root, "lock", "--quiet")
    commit(root, "numpy 2.0.2, the export forgotten")

    code, report, said = gate(root)
    assert code == 1, said
    [rule] = report["rule_failures"]
    assert rule["rule"] == "stale export" and rule["lock"].endswith("pylock.toml"), rule
    assert "uv export" in rule["message"]

    uv(root, *export)
    commit(root, "the export refreshed")
    code, report, said = gate(root)
    assert code == 0 and not report["rule_failures"], said
    [v] = report["verdicts"]
    assert v["scenario"] == "numpy.mlp" and v["verdict"] in ("identical", "within_tolerance")
    assert "2.0.1" in said and "2.0.2" in said
    assert "pylock.toml moved in step with uv.lock, which it is exported from" in said
