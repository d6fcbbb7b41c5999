"""`lockguard compare-frameworks`: the bundled families in every pinned framework, side by side.

The flow's logic (selection, one run at a time, medians, ratios to the family's fastest and to a
compiled path's plain twin, broken runs, every report format) is tested on the fake backend in
milliseconds; the real test runs the mlp family in real torch, jax and tensorflow environments
and checks that the table says what the runs themselves recorded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_cli, three_framework_project
from fakes import FakeBackend
from lockguard.config import Config, Options
from lockguard.flows.frameworks import compare_frameworks, comparison_scenarios
from lockguard.locks.ref import LockRef, read_lock
from lockguard.names import FORMATS, Verdict
from lockguard.report import load_report, render
from lockguard.settings import Settings

MLP = ["torch.mlp", "torch.mlp.compile", "numpy.mlp", "jax.mlp", "tf.mlp", "tf.mlp.xla",
       "tf.keras"]
LM = ["torch.lm", "torch.lm.compile", "jax.lm", "tf.lm"]
CNN = ["torch.cnn", "torch.cnn.compile", "jax.cnn", "tf.cnn", "tf.cnn.xla"]


def lock(tmp_path: Path, name: str, text: str) -> LockRef:
    path = tmp_path / name
    path.write_text(text)
    return LockRef(path, read_lock(path))


@pytest.fixture
def locks(tmp_path: Path) -> list[LockRef]:
    return [lock(tmp_path, "torch.txt", "torch==2.13.0\nnumpy==2.0.2\n"),
            lock(tmp_path, "jax.txt", "jax==0.10.2\njaxlib==0.10.2\n"),
            lock(tmp_path, "tf.txt", "tensorflow-cpu==2.21.0\n")]


def test_scenarios_are_the_float32_families_in_family_order():
    ids = [s.id for s in comparison_scenarios([], [])]
    assert ids == MLP + LM + CNN  # no bf16, no own-RNG scenario: other math
    assert [s.id for s in comparison_scenarios(["lm", "mlp"], ["jax"])] == ["jax.lm", "jax.mlp"]
    assert [s.id for s in comparison_scenarios(["mlp"], ["numpy", "torch"])] == [
        "torch.mlp", "torch.mlp.compile", "numpy.mlp"]


def test_runs_one_at_a_time_and_sets_the_families_side_by_side(tmp_path, locks):
    fake = FakeBackend(run_s=0.02, step_s={"torch.mlp": 0.004, "torch.mlp.compile": 0.002,
                                           "numpy.mlp": 0.001, "jax.mlp": 0.003},
                       peak_bytes={"torch.mlp": 10 << 20, "torch.mlp.compile": 25 << 20})
    config = Config(root=tmp_path, steps=6)
    report = compare_frameworks(Settings.resolve(config, Options(repeat=2)), locks,
                                comparison_scenarios([], []), backend=fake)
    # Timings are the point: a training never shares the machine with another one.
    assert fake.together == set()
    assert len(fake.runs) == 2 * len(MLP + LM + CNN)
    # Repeats in rounds: every scenario once, then every scenario again.
    assert [sid for sid, _ in fake.runs] == (MLP + LM + CNN) * 2
    assert report.passed and report.command == "compare-frameworks"
    assert {v.verdict for v in report.verdicts} == {Verdict.measured}
    table = report.frameworks
    assert table is not None and table.repeat == 2
    assert table.steps == {"mlp": 6, "lm": 6, "cnn": 6}
    assert [family for family, _ in table.families()] == ["mlp", "lm", "cnn"]
    rows = {row.scenario: row for row in table.rows}
    assert list(rows) == MLP + LM + CNN
    assert rows["numpy.mlp"].step_vs_fastest == 1.0  # the family's fastest
    assert rows["torch.mlp"].step_vs_fastest == pytest.approx(4.0)
    assert rows["torch.mlp.compile"].plain == "torch.mlp"
    assert rows["torch.mlp.compile"].step_vs_plain == pytest.approx(0.5)
    assert rows["torch.mlp.compile"].memory_vs_plain == pytest.approx(2.5)
    assert rows["tf.mlp.xla"].plain == "tf.mlp" and rows["jax.mlp"].plain is None
    assert rows["torch.lm"].version == "2.13.0" and rows["tf.lm"].framework == "tensorflow"
    assert rows["jax.mlp"].execution == "jax.jit (XLA)"
    # Step 0 is the same for every framework (same data and weights): no spread.
    assert table.step0_spread == {"mlp": 0.0, "lm": 0.0, "cnn": 0.0}
    assert all(row.device == "cpu" for row in table.rows) and table.device == "cpu"
    assert any("not tuned per framework" in caveat for caveat in table.caveats)


def test_a_broken_run_is_shown_and_fails_and_an_unpinned_framework_is_skipped(tmp_path, locks):
    fake = FakeBackend(behaviour={("torch.mlp", "2.13.0"): "crash"})
    config = Config(root=tmp_path, steps=6)
    report = compare_frameworks(Settings.resolve(config), locks[:2],
                                comparison_scenarios(["mlp"], []), backend=fake)
    assert not report.passed and report.failing == ["torch.mlp"]
    rows = {row.scenario: row for row in report.frameworks.rows}
    assert rows["torch.mlp"].verdict == Verdict.broken and rows["torch.mlp"].step_s is None
    assert rows["torch.mlp"].version == "2.13.0"  # from the lock: the run never said
    # Nothing to set the compiled path against: no ratios, and no line saying any.
    assert rows["torch.mlp.compile"].step_vs_plain is None
    assert "against torch.mlp" not in render(report, "text")
    assert report.skipped_groups() == [(3, "no lock pins tensorflow")]
    assert "tf.mlp" not in rows


def test_every_format_shows_the_table_and_json_renders_again(tmp_path, locks):
    fake = FakeBackend(step_s={"numpy.mlp": 0.0005, "torch.mlp": 0.002,
                               "torch.mlp.compile": 0.001})
    report = compare_frameworks(Settings.resolve(Config(root=tmp_path, steps=6)), locks[:1],
                                comparison_scenarios(["mlp"], []), backend=fake)
    against = "torch.mlp.compile against torch.mlp: step ×0.50"
    text = render(report, "text", width=80)
    assert "mlp, 6 steps: same data and initial weights" in text
    assert re.search(r"numpy\.mlp +1\.\d+ +2 ms +0\.5 ms +×1\.00", text), text
    assert "\n  eager\n" in text and "step 0 loss 2 in all 3 scenarios" in text
    assert against in text and "caveats:" in text
    markdown = render(report, "markdown")
    assert markdown.startswith("✅ lockguard compare-frameworks: 3 scenarios measured")
    assert ("| scenario | execution | final loss | 1st step | step | ×fastest | peak mem |"
            in markdown)
    assert f"- {against}" in markdown and "(caveats)</summary>" in markdown
    html = render(report, "html")
    assert '<section id="frameworks">' in html and "torch 2.13.0" in html and against in html
    junit = render(report, "junit")
    assert "numpy.mlp 0.5 ms" in junit and "eager on cpu: step 2 ms (×4.00 the family" in junit
    github = render(report, "github")
    assert github.startswith("::notice title=lockguard compare-frameworks")
    assert "::warning" not in github  # measured is not worth a warning
    path = tmp_path / "r.json"
    path.write_text(render(report, "json"))
    again = load_report(path)
    assert again.frameworks == report.frameworks
    for fmt in FORMATS:
        if fmt != "json":
            assert render(again, fmt) == render(report, fmt)


@pytest.mark.slow
def test_mlp_family_in_real_torch_jax_and_tensorflow(tmp_path):
    project = three_framework_project(tmp_path / "p")
    proc = run_cli("compare-frameworks", "--family", "mlp", "--report", "json=r.json",
                   "--report", "markdown=r.md", cwd=project, env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((project / "r.json").read_text())
    assert {v["scenario"]: v["verdict"] for v in report["verdicts"]} == {
        sid: "measured" for sid in MLP}
    rows = {row["scenario"]: row for row in report["frameworks"]["rows"]}
    runs = {ev["scenario"]: ev["candidate"]["result"] for ev in report["evidence"]}
    assert list(rows) == MLP
    for sid, row in rows.items():
        run = runs[sid]
        # The table says what each run recorded (one run each: the medians are the runs').
        assert row["step0_loss"] == run["losses"][0] and row["final_loss"] == run["losses"][-1]
        assert row["step_s"] == run["timings"]["step_median_s"] > 0
        assert row["first_step_s"] == run["timings"]["first_step_s"] > 0
        assert row["peak_memory_bytes"] == run["peak_memory_bytes"] is not None
        assert row["version"] == run["framework_version"]
    # Same data and initial weights in every framework: step 0 agrees to float rounding.
    assert report["frameworks"]["step0_spread"]["mlp"] < 1e-6
    fastest = min(row["step_s"] for row in rows.values())
    assert min(row["step_vs_fastest"] for row in rows.values()) == 1.0
    assert all(row["step_vs_fastest"] == row["step_s"] / fastest for row in rows.values())
    compiled = rows["torch.mlp.compile"]
    assert compiled["plain"] == "torch.mlp"
    assert compiled["step_vs_plain"] == compiled["step_s"] / rows["torch.mlp"]["step_s"]
    assert compiled["notes"] == []  # the bundled MLP compiles whole: no break, no fallback
    assert rows["tf.mlp.xla"]["plain"] == "tf.mlp" and rows["tf.mlp.xla"]["notes"] == []
    assert rows["torch.mlp"]["version"].startswith("2.13.0")
    assert rows["jax.mlp"]["version"] == "0.10.2"
    assert rows["tf.mlp"]["version"] == "2.21.0"
    assert "torch.mlp.compile against torch.mlp: step ×" in proc.stdout
    assert "| torch.mlp.compile | torch.compile (inductor) |" in (project / "r.md").read_text()
    html = run_cli("report", "r.json", "--format", "html", cwd=project)
    assert html.returncode == 0 and '<section id="frameworks">' in html.stdout


@pytest.mark.slow
def test_cnn_family_in_real_torch_jax_and_tensorflow(tmp_path):
    """The cnn family (conv, BatchNorm, residual block) in the three frameworks: step 0 agrees
    to float rounding, the compiled twins stand beside their plain twins, and every run also
    agrees on its last loss and its eval-mode probe outputs (BatchNorm's running statistics)
    within float32 rounding, 20 Adam steps on."""
    project = three_framework_project(tmp_path / "p")
    proc = run_cli("compare-frameworks", "--family", "cnn", "--report", "json=r.json",
                   cwd=project, env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((project / "r.json").read_text())
    assert {v["scenario"]: v["verdict"] for v in report["verdicts"]} == {
        sid: "measured" for sid in CNN}
    rows = {row["scenario"]: row for row in report["frameworks"]["rows"]}
    runs = {ev["scenario"]: ev["candidate"]["result"] for ev in report["evidence"]}
    assert list(rows) == CNN
    assert report["frameworks"]["step0_spread"]["cnn"] < 1e-6
    assert rows["torch.cnn.compile"]["plain"] == "torch.cnn"
    assert rows["torch.cnn.compile"]["notes"] == []  # compiles whole: no break, no fallback
    assert rows["tf.cnn.xla"]["plain"] == "tf.cnn" and rows["tf.cnn.xla"]["notes"] == []
    reference = runs["torch.cnn"]
    for sid in CNN:
        run = runs[sid]
        assert run["dtype"] == "float32" and run["steps"] == 20
        assert run["losses"][-1] < run["losses"][0]  # it learns
        assert run["losses"][-1] == pytest.approx(reference["losses"][-1], rel=1e-4)
        # eval mode: normalised by the running statistics the 20 steps accumulated
        assert run["outputs"] == pytest.approx(reference["outputs"], rel=1e-3, abs=1e-4)
        assert run["output_shape"] == [4, 4]
        # the running statistics are in the digest beside the parameters, in every framework
        assert {"bn1_mean", "bn1_var", "bn3_mean", "bn3_var", "fc_w"} <= set(run["param_norms"])
    assert "cnn, 20 steps: same data and initial weights" in proc.stdout


def test_the_text_table_fits_80_columns_with_real_figures_and_cuts_nothing():
    """The README's figures, a run that broke and a device peak: every header and figure
    whole at 80 columns, nothing cut short ("…"), nothing wider."""
    from lockguard.report import FrameworkRow, FrameworkTable, Report

    def row(sid, execution, step, first, peak, **extra):
        return FrameworkRow(family="mlp", scenario=sid, framework=sid.split(".")[0],
                            execution=execution, device="cpu", verdict=Verdict.measured,
                            runs=3, step0_loss=1.3795440, final_loss=0.440036, step_s=step,
                            first_step_s=first, step_vs_fastest=step / 0.000162,
                            peak_memory_bytes=peak, **extra)

    rows = [row("torch.mlp.compile", "torch.compile (inductor)", 0.000986, 38.82, 101_500_000,
                peak_device_memory_bytes=1_288_490_188, plain="torch.mlp",
                step_vs_plain=1.4, first_step_vs_plain=674.61, memory_vs_plain=6.9,
                notes=["2 graph break(s)"]),
            row("tf.mlp.xla", "tf.function + XLA", 0.000668, 1.67, 118_200_000),
            row("jax.mlp", "jax.jit (XLA)", 0.000162, 0.154, 86_700_000),
            FrameworkRow(family="mlp", scenario="tf.keras", framework="tensorflow",
                         execution="Keras in tf.function", device="cpu",
                         verdict=Verdict.broken, runs=1)]
    table = FrameworkTable(device="cpu", threads=1, repeat=3, steps={"mlp": 30},
                           step0_spread={"mlp": 8.6e-08}, rows=rows, caveats=["Same math."])
    report = Report(command="compare-frameworks", mode="frameworks", frameworks=table)
    text = render(report, "text", width=80)
    assert "…" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    for header in ("scenario", "final loss", "1st step", "step", "×fastest", "peak mem"):
        assert header in text.splitlines()[2], text
    for figure in ("38.82 s", "0.986 ms", "96.8 MiB", "×6.09", "×1.00", "torch.compile",
                   "(inductor)", "Keras in tf.function", "tf.function + XLA"):
        assert figure in text, (figure, text)
    assert "torch.mlp.compile: peak device memory 1228.8 MiB" in text
    assert "tf.keras: broken (below): its figures are missing" in text
    assert "torch.mlp.compile: 2 graph break(s)" in text
    assert "relative spread 8.6e-08" in text


def test_data_parallel_scenarios_need_a_gpu_a_worker_on_cuda(tmp_path, locks, monkeypatch):
    """On the CPU they split the CPU; on cuda each worker takes a GPU (NCCL refuses two on
    one): a host that shows fewer skips them, saying so, and one without a visible driver runs
    them (they fall back to the CPU: device_fallback, like every scenario there). The plan
    itself reads no hardware (a shard plan is the same on every machine); TPUs are not wired."""
    from lockguard.flows import pipeline
    from lockguard.scenarios import bundled

    dp = [s for s in bundled() if s.id in ("torch.ddp", "jax.dp", "tf.dp")]
    assert {s.replicas for s in dp} == {2}
    config = Config(root=tmp_path)

    def reasons(device: str, shown: int | None) -> set:
        monkeypatch.setattr(pipeline, "visible_gpus", lambda: shown)
        planned = pipeline.plan(Settings.resolve(config, Options(device=device)), dp, locks)
        if device != "tpu":
            assert {p.skip_reason for p in planned} == {None}
        return {p.skip_reason for p in pipeline.on_this_host(planned)}

    assert reasons("cpu", 1) == {None}
    assert reasons("cuda", 1) == {"trains on 2 GPUs at once (a worker a GPU); this host "
                                  "shows 1"}
    assert reasons("cuda", 2) == reasons("cuda", 8) == {None}
    assert reasons("cuda", 0) == reasons("cuda", None) == {None}
    assert reasons("tpu", 4) == {"trains on 2 devices at once: on the CPU or on GPUs, not on "
                                 "tpu"}
