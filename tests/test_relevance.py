"""What an A/B leaves out (Scenario.unreached, flows/ab.unreached): a costly bundled scenario
(compiled, data parallel, data pipeline, model library) whose own path and framework a lock
change does not reach, while its eager twin runs; stated in the report, never a user's
scenario, never past a startup file that runs code. On the fake backend here; the last tests
run the real torch: the A/B of a numpy bump, and the compiler reach held against torch's own
requirements and imports."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from conftest import TORCH_LOCK, TORCH_OLD_LOCK, lockguard_python
from fakes import FakeBackend, lock
from lockguard.config import Config, Options
from lockguard.flows.ab import check_ab
from lockguard.locks.diff import Change, StartupFile
from lockguard.locks.families import REACHES, package_families
from lockguard.locks.ref import LockRef, read_lock
from lockguard.names import Verdict
from lockguard.report import render
from lockguard.scenarios import Scenario, bundled
from lockguard.settings import Settings

TORCH = ["torch.mlp", "torch.mlp.compile", "torch.ddp", "torch.data", "torchvision.resnet18"]


def chosen(*ids: str) -> list[Scenario]:
    return [s for s in bundled() if s.id in ids]


def ab(tmp_path: Path, old: str, new: str, ids=TORCH, options: Options | None = None,
       config: Config | None = None, fake: FakeBackend | None = None):
    config = config or Config(root=tmp_path, golden_dir="golden", steps=4)
    fake = fake or FakeBackend()
    report = check_ab(Settings.resolve(config, options), [lock(tmp_path, "new.txt", new)],
                      [lock(tmp_path, "old.txt", old)], chosen(*ids), backend=fake)
    return {v.scenario: v for v in report.verdicts}, fake, report


OLD = "numpy==1.26.4\ntorch==2.13.0\ntorchvision==0.28.0\nsympy==1.13.0\npillow==11.0.0\n"


def test_a_numpy_bump_leaves_out_the_compiled_and_parallel_runs_saying_why(tmp_path):
    verdicts, fake, report = ab(tmp_path, OLD, OLD.replace("numpy==1.26.4", "numpy==2.0.2"),
                                ids=TORCH + ["torch.lm", "torch.lm.compile"])
    assert verdicts["torch.mlp.compile"].verdict == Verdict.skipped
    assert verdicts["torch.mlp.compile"].reasons == [
        "not run: no compiler package changed, only numpy, which the eager twin that ran sees "
        "alike (--all-scenarios runs it)"]
    assert verdicts["torch.ddp"].verdict == Verdict.skipped
    assert "no package of its parallel path changed" in verdicts["torch.ddp"].reasons[0]
    # numpy is the data pipeline's and the model library's: they run.
    ran = {sid for sid, _ in fake.runs}
    assert ran == {"torch.mlp", "torch.lm", "torch.data", "torchvision.resnet18"}
    assert verdicts["torch.data"].verdict != Verdict.skipped
    # Named in the report, grouped by reason.
    text = render(report, "text")
    assert ("2 skipped: torch.mlp.compile, torch.lm.compile not run: no compiler package "
            "changed") in " ".join(text.split())

def test_what_the_change_reaches_runs(tmp_path):
    # sympy is torch.compile's: the compiled run runs; the parallel path is torch's own.
    verdicts, fake, _ = ab(tmp_path, OLD, OLD.replace("sympy==1.13.0", "sympy==1.14.0"))
    ran = {sid for sid, _ in fake.runs}
    assert ran == {"torch.mlp", "torch.mlp.compile"}
    assert "sympy" in verdicts["torch.data"].reasons[0]
    # pillow is torchvision's.
    _, fake, _ = ab(tmp_path, OLD, OLD.replace("pillow==11.0.0", "pillow==11.1.0"))
    assert {sid for sid, _ in fake.runs} == {"torch.mlp", "torchvision.resnet18"}
    # torch reaches everything of its own.
    verdicts, fake, _ = ab(tmp_path, OLD, OLD.replace("torch==2.13.0", "torch==2.14.1"))
    assert {sid for sid, _ in fake.runs} == set(TORCH)
    assert not any(v.verdict == Verdict.skipped for v in verdicts.values())


def test_a_cuda_wheel_or_an_installer_option_reaches_everything(tmp_path):
    old = OLD + "nvidia-nccl-cu12==2.21.5\n"
    _, fake, _ = ab(tmp_path, old, old.replace("2.21.5", "2.23.4"))
    assert {sid for sid, _ in fake.runs} == set(TORCH)
    # The same pins from another index may be other files: nothing is left out.
    _, fake, _ = ab(tmp_path, OLD, "--index-url https://example.org/simple\n"
                 + OLD.replace("numpy==1.26.4", "numpy==2.0.2"))
    assert {sid for sid, _ in fake.runs} == set(TORCH)


def test_a_changed_package_whose_startup_file_runs_code_reaches_everything(tmp_path):
    """A .pth that imports runs before any training, torch.compile's included: what it does
    there only that run shows."""
    fake = FakeBackend(startup={"numpy": (("numpy-hook.pth", True),)})
    _, fake, _ = ab(tmp_path, OLD, OLD.replace("numpy==1.26.4", "numpy==2.0.2"), fake=fake)
    assert {sid for sid, _ in fake.runs} == set(TORCH)
    # One that only adds to sys.path runs nothing.
    fake = FakeBackend(startup={"numpy": (("numpy-path.pth", False),)})
    _, fake, _ = ab(tmp_path, OLD, OLD.replace("numpy==1.26.4", "numpy==2.0.2"), fake=fake)
    assert "torch.mlp.compile" not in {sid for sid, _ in fake.runs}


def test_without_its_twin_or_when_asked_everything_runs(tmp_path):
    new = OLD.replace("numpy==1.26.4", "numpy==2.0.2")
    # torch.mlp, which sees the numpy change as the compiled run would, is not selected.
    verdicts, fake, _ = ab(tmp_path, OLD, new, ids=["torch.mlp.compile", "torch.ddp"])
    assert {sid for sid, _ in fake.runs} == {"torch.mlp.compile", "torch.ddp"}
    _, fake, _ = ab(tmp_path, OLD, new, options=Options(all_scenarios=True))
    assert {sid for sid, _ in fake.runs} == set(TORCH)
    config = Config(root=tmp_path, golden_dir="golden", steps=4, skip_unreached=False)
    _, fake, _ = ab(tmp_path, OLD, new, config=config)
    assert {sid for sid, _ in fake.runs} == set(TORCH)


def test_a_user_scenario_and_an_eager_one_are_never_left_out(tmp_path):
    numpy_only = [Change(name="numpy", display_name="numpy", kind="upgraded")]
    user = Scenario(id="mine", framework="torch", description="", steps=3,
                    script=tmp_path / "mine.py")
    assert user.unreached(numpy_only) is None
    assert all(s.unreached(numpy_only) is None for s in bundled() if s.reach is None)
    assert all(s.covered_by and next(t for t in bundled() if t.id == s.covered_by).reach is None
               for s in bundled() if s.reach is not None)
    hooked = [Change(name="numpy", display_name="numpy", kind="upgraded",
                     startup_files=(StartupFile(file="x.pth", runs_code=True),))]
    assert all(s.unreached(hooked) is None for s in bundled())
    assert all(s.unreached([]) is None for s in bundled())


# ------------------------------------------------------------------------------ the real torch

@pytest.mark.slow
def test_a_real_numpy_bump_runs_the_eager_twin_and_leaves_the_compiled_run_out(tmp_path):
    config = Config(root=tmp_path, golden_dir="golden", steps=3)
    report = check_ab(Settings.resolve(config), [LockRef(TORCH_LOCK, read_lock(TORCH_LOCK))],
                      [LockRef(TORCH_OLD_LOCK, read_lock(TORCH_OLD_LOCK))],
                      chosen("torch.mlp", "torch.mlp.compile"))
    verdicts = {v.scenario: v for v in report.verdicts}
    assert verdicts["torch.mlp.compile"].verdict == Verdict.skipped, verdicts
    assert verdicts["torch.mlp.compile"].reasons[0].startswith(
        "not run: no compiler package changed, only numpy")
    assert verdicts["torch.mlp"].verdict not in (Verdict.skipped, Verdict.broken)
    assert [e.scenario for e in report.evidence] == ["torch.mlp"]


def _requirement_names(site: Path, dist: str) -> set[str]:
    meta = next(site.glob(f"{dist}-*.dist-info")) / "METADATA"
    names = set()
    for line in meta.read_text().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            names.add(re.split(r"[\s;<>=!~\[(]", line.split(":", 1)[1].strip())[0].lower())
    return {n.replace("_", "-") for n in names}


@pytest.mark.slow
def test_the_compiler_reach_holds_what_torch_requires_and_what_its_compiler_imports():
    """REACHES["compiler"] claims to hold every package torch.compile's path may import beyond
    torch: torch's own requirements, and what torch/_dynamo, _inductor, _functorch and fx
    import from outside torch and the standard library when it is installed. A torch that
    requires or imports another fails this, before a gate leaves a compiled run out wrongly."""
    python = lockguard_python(TORCH_LOCK)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    reach = REACHES["compiler"]

    def outside(name: str) -> bool:
        return not ({"torch", "cuda"} & set(package_families(name))) and name not in reach

    assert not {n for n in _requirement_names(site, "torch") if outside(n)}
    # Module names of the optional packages torch.compile's path imports, and their
    # distributions where the two differ.
    distribution = {"yaml": "pyyaml", "z3": "z3-solver", "PIL": "pillow", "_pytest": "pytest",
                    "cuda": "cuda-bindings"}
    # Not distributions anyone installs: Meta's internal modules, the next Python's stdlib,
    # a docstring's example, torch's own code generator (in the torch wheel).
    nowhere = {"libfb", "rfe", "mtia", "deeplearning", "annotationlib", "foo", "torchgen"}
    imported: set[str] = set()
    for part in ("_dynamo", "_inductor", "_functorch", "fx", "utils/_pytree.py",
                 "_subclasses"):
        root = site / "torch" / part
        for path in ([root] if root.is_file() else root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_bytes())):
                if isinstance(node, ast.Import):
                    imported.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.split(".")[0])
    foreign = {m for m in imported if m not in sys.stdlib_module_names and m not in nowhere
               and m not in ("torch", "triton", "functorch", "numpy", "__future__")}
    names = {distribution.get(m, m).lower().replace("_", "-") for m in foreign}
    assert not {n for n in names if outside(n)}, sorted(n for n in names if outside(n))
