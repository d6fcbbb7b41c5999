"""Compile diagnostics without a framework: the harness's text normalisation and accuracy rule
(lockguard/harness/_lockguard_harness/compile_torch.py, stdlib only until it patches torch),
compare's compile rules (reworded breaks, miscompile evidence, compile-time ratio) and the
side-by-side report; which venvs share their compilers' caches (lockguard/envs/compile_cache.py,
on venvs of METADATA files only).

The log texts below are what torch 2.13's dynamo wrote in real runs (paths from this machine).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import math
import os
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from lockguard.compare.compile import accuracy_failure, break_site, compare_compile
from lockguard.compare.tolerance import Policy
from lockguard.compare.verdicts import compare_runs, is_failure
from lockguard.envs.base import compile_cache_env
from lockguard.envs.compile_cache import compile_cache_dir, compiler_closure
from lockguard.harness._lockguard_harness import compile_torch as ct
from lockguard.locks.parser import parse_lock_text
from lockguard.names import Verdict
from lockguard.report import Report, render
from lockguard.report._common import compile_rows
from lockguard.results import SCHEMA_VERSION, CompileDiagnostics, RunResult

SITE_PACKAGES = "/root/.cache/lockguard/venvs/6dbca48bb7eea5753d72/lib/python3.11/site-packages"

BREAK_RECORD = f"""Graph break in user code at {SITE_PACKAGES}/lg_testlayer/__init__.py:14
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Unsupported Tensor.item() call with capture_scalar_outputs=False
  Explanation: Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.
  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True` or `export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1` to include these operations in the captured graph.

  Developer debug context: call_method TensorVariable() item () {{}}

 For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html

User code traceback:
  File "/tmp/pytest-of-root/pytest-7/p0/train_layer.py", line 21, in run
    loss = ((step(x) - y) ** 2).mean()
  File "{SITE_PACKAGES}/torch/nn/modules/module.py", line 1789, in _call_impl
    return forward_call(*args, **kwargs)
  File "{SITE_PACKAGES}/lg_testlayer/__init__.py", line 14, in forward
    if (h.abs() > 1e4).sum().item() > 0:
"""

COUNTER_KEY = (
    "Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: Dynamo does"
    " not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.\n\n"
    "  Developer debug context: call_method TensorVariable() item () {}\n"
)

RECOMPILE_RECORD = """Recompiling function torch_dynamo_resume_in_forward_at_10 in /tmp/cx/exp1.py:10
    triggered by the following guard failure(s):
    - 1/1: tensor 'h' size mismatch at index 0. expected 2, actual 3
    - 1/0: ___stack0 == -0.6985620260238647                         # if h.sum().item() > 0:  # mp/cx/exp1.py:10 in torch_dynamo_resume_in_forward_at_10
    - User stack trace:
    -   File "/tmp/cx/exp1.py", line 10, in torch_dynamo_resume_in_forward_at_10
    -     if h.sum().item() > 0:"""

LIMIT_RECORD = """torch._dynamo hit config.recompile_limit (3)
   function: 'f' (/tmp/cx/u/user_lim.py:5)
   last reason: 0/2: tag == 'ttt'                                  # return (x * len(tag)).sum()
User stack trace:
  File "/tmp/cx/u/user_lim.py", line 7, in f"""


# --------------------------------------------------------------------------------------------
# Harness text normalisation


def test_paths_lose_the_machine_but_keep_the_package() -> None:
    assert ct.short_path(f"{SITE_PACKAGES}/lg_testlayer/layer.py") == "lg_testlayer/layer.py"
    assert ct.short_path("/home/a/project/mypkg/__init__.py") == "mypkg/__init__.py"
    assert ct.short_path("/tmp/pytest-of-root/pytest-7/p0/train_layer.py") == "train_layer.py"
    text = ct.normalise('bad at 0x7f3a9c01 in "/home/u/x/model.py", line 12 and /opt/y/z.py:40')
    assert text == 'bad at 0x… in "model.py" and z.py'


def test_graph_break_record_gives_site_and_short_reason() -> None:
    recorder = ct.Recorder()
    recorder.capture.breaks.append(BREAK_RECORD)
    reasons = ct._reasons(recorder._located_breaks({COUNTER_KEY: 1}))
    assert reasons == ["lg_testlayer/__init__.py:forward: "
                       "Unsupported Tensor.item() call with capture_scalar_outputs=False"]
    # The same break on another machine, moved down by unrelated edits: the same reason.
    moved = BREAK_RECORD.replace("line 14", "line 40").replace(":14", ":40").replace(
        SITE_PACKAGES, "/opt/venv/lib/python3.12/site-packages")
    other = ct.Recorder()
    other.capture.breaks.append(moved)
    assert ct._reasons(other._located_breaks({COUNTER_KEY: 1})) == reasons


def test_counted_breaks_without_a_log_record_still_have_a_reason() -> None:
    # torch 2.0 has the counters but not the graph_breaks log artifact.
    assert ct._reasons(ct.Recorder()._located_breaks(
        {"generic_jump TensorVariable()": 2})) == [
        "generic_jump TensorVariable()"]


def test_recompile_reasons_drop_ids_comments_and_data_values() -> None:
    assert ct._recompile_reasons(RECOMPILE_RECORD) == [
        "exp1.py:forward: tensor 'h' size mismatch at index 0. expected 2, actual 3",
        "exp1.py:forward: ___stack0 == <float>",
    ]


def test_recompile_limit_is_an_eager_fallback_reason() -> None:
    assert ct._limit_reason(LIMIT_RECORD) == (
        "user_lim.py:f: hit the recompile_limit (3): runs eagerly from then on")


def test_enclosing_function_from_source(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def outer(x):\n    def inner(y):\n        return y\n    return inner(x)\n")
    assert ct.enclosing_function(str(src), 3) == "inner"
    assert ct.enclosing_function(str(src), 4) == "outer"
    assert ct.site(str(src), 3, "<lambda>") == "m.py:inner"


def test_accuracy_rule_is_pytorch_ci_s() -> None:
    fp64 = {"losses": [1.0, 0.5], "outputs": [0.25]}
    eager = {"losses": [1.0 + 1e-6, 0.5], "outputs": [0.25]}
    close = {"losses": [1.0 + 2e-6, 0.5], "outputs": [0.25]}
    far = {"losses": [1.0 + 1e-3, 0.5], "outputs": [0.25]}
    good = ct.accuracy(close, eager, fp64)
    assert good["ok"] and good["k"] == 2.0
    bad = ct.accuracy(far, eager, fp64)
    assert not bad["ok"] and not bad["series"]["losses"]["ok"] and bad["series"]["outputs"]["ok"]
    nan = ct.accuracy({"losses": [float("nan"), 0.5], "outputs": [0.25]}, eager, fp64)
    assert not nan["ok"] and nan["series"]["losses"]["compiled_vs_fp64"] == "inf"


# --------------------------------------------------------------------------------------------
# compare


def result(compile: CompileDiagnostics | dict | None = None, **fields: object) -> RunResult:
    data: dict[str, object] = {
        "schema_version": SCHEMA_VERSION, "scenario": "layer", "framework": "torch",
        "device": "cpu", "steps": 3, "losses": [1.0, 0.9, 0.8], "compile": compile,
    }
    data.update(fields)
    return RunResult.model_validate(data)


def verdict(old: RunResult, new: RunResult, timed: bool = False):
    return compare_runs([old], [new], policy=Policy(), baseline_kind="lock",
                        expected_device="cpu", timed_together=timed)


ITEM = "lg_testlayer/__init__.py:forward: Unsupported Tensor.item() call"


def test_a_new_break_names_its_site_and_reason() -> None:
    v = verdict(result(CompileDiagnostics(graph_breaks=0, graphs=1)),
                result(CompileDiagnostics(graph_breaks=1, graphs=2, break_reasons=[ITEM])))
    assert v.verdict == Verdict.compile_fallback
    assert v.compile_diff.added_break_reasons == [ITEM]
    assert break_site(ITEM) == "lg_testlayer/__init__.py:forward"
    assert ITEM in v.reasons[0]


def test_a_reworded_break_at_the_same_site_is_not_a_regression() -> None:
    old = CompileDiagnostics(graph_breaks=1, break_reasons=["m.py:forward: Tensor.item"])
    new = CompileDiagnostics(graph_breaks=1, break_reasons=[
        "m.py:forward: Unsupported Tensor.item() call with capture_scalar_outputs=False"])
    diff = compare_compile(old, new)
    assert not diff.regressed and not diff.improvement
    assert diff.reworded_break_reasons == [[old.break_reasons[0], new.break_reasons[0]]]
    v = verdict(result(old), result(new))
    assert v.verdict == Verdict.identical
    assert any("reworded" in r for r in v.reasons)
    # More breaks than before: the new wording is a new break after all.
    more = new.model_copy(update={"graph_breaks": 2})
    assert compare_compile(old, more).added_break_reasons == new.break_reasons


def test_fewer_breaks_is_an_improvement_that_fails_only_on_request() -> None:
    v = verdict(result(CompileDiagnostics(graph_breaks=1, break_reasons=[ITEM])),
                result(CompileDiagnostics(graph_breaks=0)))
    assert v.verdict == Verdict.identical and v.improvement
    assert not is_failure(v, Policy()) and is_failure(v, Policy(fail_on_improvement=True))


MISCOMPILED = {
    "graph_breaks": 0,
    "accuracy": {"rule": "rmse(compiled, fp64) <= 2 * rmse(eager, fp64) + 1e-05", "k": 2.0,
                 "ok": False, "series": {
                     "losses": {"compiled_vs_fp64": 0.01, "eager_vs_fp64": 1e-7,
                                "limit": 1.02e-5, "ok": False},
                     "outputs": {"compiled_vs_fp64": 1e-7, "eager_vs_fp64": 1e-7,
                                 "limit": 1.02e-5, "ok": True}}},
}


def test_miscompile_is_compile_fallback_evidence_of_its_own() -> None:
    same = result(MISCOMPILED)
    v = verdict(result(CompileDiagnostics(graph_breaks=0)), same)
    assert v.verdict == Verdict.compile_fallback
    assert v.reasons[0].startswith("miscompile: ")
    assert "losses 0.01 from fp64 where eager is 1e-07 (limit 1.02e-05)" in v.reasons[0]
    assert "outputs" not in v.reasons[0]
    passed = dict(MISCOMPILED, accuracy=dict(MISCOMPILED["accuracy"], ok=True))
    assert accuracy_failure(CompileDiagnostics(**passed)) is None
    assert accuracy_failure(CompileDiagnostics(graph_breaks=0)) is None


def test_accuracy_check_is_a_typed_field_and_its_json_round_trips() -> None:
    # What the harness writes (a NaN made the distance "inf") is read into AccuracyCheck, not
    # kept as an untyped extra, and written back as the same JSON; runs without it gain no key.
    fp64 = {"losses": [1.0, 0.5], "outputs": [0.25]}
    nan = {"losses": [float("nan"), 0.5], "outputs": [0.25]}
    written = {"graph_breaks": 0, "accuracy": ct.accuracy(nan, fp64, fp64), "dynamo": {"x": 1}}
    diagnostics = CompileDiagnostics.model_validate(json.loads(json.dumps(written)))
    assert diagnostics.accuracy is not None and diagnostics.model_extra == {"dynamo": {"x": 1}}
    assert diagnostics.accuracy.series["losses"].compiled_vs_fp64 == math.inf
    assert diagnostics.model_dump(mode="json", exclude_defaults=True) == written
    assert "accuracy" not in CompileDiagnostics(graph_breaks=0).model_dump(mode="json")
    assert "losses inf from fp64 where eager is 0 (limit 1e-05)" in accuracy_failure(diagnostics)


def test_compile_time_ratio_only_when_timed_together() -> None:
    old = result(CompileDiagnostics(compile_s=2.0))
    new = result(CompileDiagnostics(compile_s=5.0))
    assert verdict(old, new).compile_time_ratio is None
    v = verdict(old, new, timed=True)
    assert v.compile_time_ratio == 2.5
    assert any(r.startswith("compilation takes 2.50×") for r in v.reasons)
    assert v.verdict == Verdict.identical  # a note, not a verdict


# --------------------------------------------------------------------------------------------
# The report: old and new side by side


def test_side_by_side_rows_pair_reasons() -> None:
    diff = compare_compile(
        CompileDiagnostics(graph_breaks=1, recompiles=0, break_reasons=["a.py:f: x", "a.py:g: y"]),
        CompileDiagnostics(graph_breaks=2, recompiles=0, break_reasons=["a.py:f: x", ITEM]))
    assert compile_rows(diff) == [
        ("graph breaks", "1", "2"),
        ("break", "a.py:f: x", "a.py:f: x"),
        ("- break", "a.py:g: y", "—"),
        ("+ break", "—", ITEM),
    ]
    assert compile_rows(compare_compile(CompileDiagnostics(), CompileDiagnostics())) == []


def test_text_and_markdown_show_old_and_new_side_by_side() -> None:
    v = verdict(result(CompileDiagnostics(graph_breaks=0, backend="inductor", compile_s=1.0)),
                result(CompileDiagnostics(graph_breaks=1, break_reasons=[ITEM],
                                          backend="inductor", compile_s=1.5)))
    report = Report(command="check", mode="ab", verdicts=[v], passed=False)
    text = render(report, "text")
    rows = [line.split() for line in text.split("compiled path  baseline  candidate")[1]
            .splitlines()]
    assert ["+", "break", "—", *ITEM.split()] in rows
    assert ["graph", "breaks", "0", "1"] in rows
    assert ["compile", "time", "1.00", "s", "1.50", "s"] in rows
    md = render(report, "markdown")
    assert "| compiled path | baseline | candidate |" in md
    assert "| + break | — | <code>lg_testlayer/__init__.py:forward: Unsupported Tensor.item()" \
        " call</code> |" in md


# --------------------------------------------------------------------------------------------
# The layer a graph break is in (harness break_layer.py; the real torch run: test_compile.py)

LAYERS = """\
class Module:
    \"\"\"named_modules() as torch's: (path, module), the module itself first as "".\"\"\"

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, child in vars(self).items():
            if isinstance(child, Module):
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name)


def clip(h):
    return h.item()


class Mlp(Module):
    def forward(self, x):
        h = x
        return clip(h)


class Block(Module):
    def __init__(self):
        self.mlp = Mlp()

    def forward(self, x):
        return x + self.mlp.forward(x)


class Model(Module):
    def __init__(self):
        self.first, self.second = Block(), Block()

    def forward(self, x):
        return self.second.forward(self.first.forward(x))
"""


def line_of(code: str) -> int:
    """The line of LAYERS that is `code`."""
    return LAYERS.splitlines().index(code) + 1


CLIP = line_of("    return h.item()")  # where Dynamo stops, in a function of no class
MLP = line_of("        return clip(h)")  # inside Mlp.forward
BLOCK = line_of("        return x + self.mlp.forward(x)")  # inside Block.forward


def layers(tmp_path: Path):
    """The classes of LAYERS, loaded from a real file (code objects name it)."""
    path = tmp_path / "site-packages" / "deplayer" / "layers.py"
    path.parent.mkdir(parents=True)
    path.write_text(LAYERS)
    namespace: dict = {}
    exec(compile(LAYERS, str(path), "exec"), namespace)  # noqa: S102 - the test's own text
    return path, namespace


def break_record(path: Path, frames: list[tuple[int, str]]) -> str:
    """A graph-break record in torch 2.13's shape, its user stack `frames` (line, function)."""
    stack = "".join(f'  File "{path}", line {line}, in {fn}\n    ...\n' for line, fn in frames)
    return BREAK_RECORD.split("User code traceback:")[0] + "User code traceback:\n" + stack


def test_a_break_is_placed_in_the_innermost_module_method_around_it(tmp_path: Path) -> None:
    path, ns = layers(tmp_path)
    model = ns["Model"]()
    recorder = ct.Recorder()
    recorder.remember(model)
    # Dynamo stopped in clip, called by Mlp.forward, called by Block.forward.
    recorder.capture.breaks.append(break_record(path, [(BLOCK, "forward"), (MLP, "forward"),
                                                       (CLIP, "clip")]))
    [(reason, where)] = recorder._located_breaks({COUNTER_KEY: 1})
    assert reason == "deplayer/layers.py:clip: " \
        "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    # Two Mlp modules run that code: the first in named_modules() order, and how many.
    assert where == {"file": "deplayer/layers.py", "line": CLIP, "function": "clip",
                     "module": "first.mlp", "module_class": "Mlp", "method": "forward",
                     "modules": 2}
    # A break in Block's own code is Block's; one outside any module's method names no layer.
    outer = ct.Recorder()
    outer.remember(model)
    outer.capture.breaks.append(break_record(path, [(BLOCK, "forward")]))
    assert outer._located_breaks({})[0][1]["module"] == "first"
    lone = ct.Recorder()
    lone.remember(model)
    lone.capture.breaks.append(break_record(path, [(CLIP, "clip")]))
    assert "module" not in lone._located_breaks({})[0][1]


def test_the_record_that_names_the_layer_wins_and_reaches_the_diagnostics(tmp_path) -> None:
    path, ns = layers(tmp_path)
    model = ns["Model"]()
    recorder = ct.Recorder()
    recorder.remember(model.forward)
    recorder.remember(model)  # once: nn.Module.compile hands torch.compile a bound method
    assert len(recorder.models) == 1
    recorder.compile_calls = 1
    # A repeated break is logged with its innermost place only ("in user code at ..."): the
    # full stack's record, logged first, still names the layer.
    full = break_record(path, [(MLP, "forward"), (CLIP, "clip")])
    repeated = full.split("User code traceback:")[0].replace(
        f"{SITE_PACKAGES}/lg_testlayer/__init__.py:14", f"{path}:{CLIP}")
    recorder.capture.breaks += [repeated, full]
    out = recorder.diagnostics()
    [where] = out["break_locations"]
    assert where["reason"] == out["break_reasons"][0] and where["module"] == "first.mlp"
    diagnostics = CompileDiagnostics.model_validate(out)
    assert diagnostics.break_locations[0].method == "forward"


def test_a_break_is_placed_as_it_is_logged_while_its_model_lives(tmp_path: Path) -> None:
    # A user script's model is gone when the diagnostics are read (run() returned): the place
    # is found when dynamo logs the break, during tracing.
    path, ns = layers(tmp_path)
    model = ns["Model"]()
    recorder = ct.Recorder()
    recorder.remember(model)
    log = logging.getLogger("lockguard_test.__graph_breaks")
    log.addHandler(recorder.capture)
    try:
        log.warning("%s", break_record(path, [(MLP, "forward"), (CLIP, "clip")]))
    finally:
        log.removeHandler(recorder.capture)
    del model
    gc.collect()
    assert recorder.models[0]() is None
    [(_, where)] = recorder._located_breaks({})
    assert where["module"] == "first.mlp"


def test_break_locations_are_bounded_on_arrival() -> None:
    ok = {"reason": ITEM, "file": "lg/x.py", "line": 3, "function": "clip"}
    CompileDiagnostics.model_validate({"break_locations": [ok]})
    for bad in ({**ok, "module": "m" * 201}, {**ok, "line": 0}, {**ok, "extra": 1},
                {**ok, "modules": 0}, {"file": "x.py"}):
        with pytest.raises(ValidationError):
            CompileDiagnostics.model_validate({"break_locations": [bad]})
    with pytest.raises(ValidationError):
        CompileDiagnostics.model_validate({"break_locations": [ok] * 51})
    # Runs without places keep their JSON exactly (goldens written before the field).
    assert "break_locations" not in CompileDiagnostics(graph_breaks=0).model_dump(mode="json")


PLACED = {"reason": ITEM, "file": "lg_testlayer/__init__.py", "line": 14, "function": "clip",
          "module": "blocks.1.mlp", "module_class": "Mlp", "method": "forward", "modules": 2}
LAYER = "blocks.1.mlp (Mlp.forward → clip, lg_testlayer/__init__.py:14; 1 of 2 Mlp modules)"


def test_a_new_break_names_the_layer_in_every_report_format() -> None:
    v = verdict(result(CompileDiagnostics(graph_breaks=0)),
                result(CompileDiagnostics.model_validate(
                    {"graph_breaks": 1, "break_reasons": [ITEM], "break_locations": [PLACED]})))
    assert v.verdict == Verdict.compile_fallback
    line = f"graph break introduced in {LAYER}: Unsupported Tensor.item() call"
    assert v.compile_diff.regressions == ["graph breaks 0 → 1", line]
    assert line in v.reasons[0]
    assert ("+ break, layer", "—", LAYER) in compile_rows(v.compile_diff)
    report = Report(command="check", mode="ab", verdicts=[v], passed=False)
    for fmt in ("text", "markdown", "json", "junit", "github", "html"):
        shown = " ".join(render(report, fmt).split())
        assert "blocks.1.mlp" in shown and "lg_testlayer/__init__.py:14" in shown, fmt
    # A placed break the candidate lost is shown on the baseline's side.
    gone = compare_compile(CompileDiagnostics.model_validate(
        {"graph_breaks": 1, "break_reasons": [ITEM], "break_locations": [PLACED]}),
        CompileDiagnostics(graph_breaks=0))
    assert ("- break, layer", LAYER, "—") in compile_rows(gone)


# --------------------------------------------------------------------------------------------
# Compiled vs eager peak memory

MIB = 1 << 20


def memory(compiled_device: int, eager_device: int) -> CompileDiagnostics:
    return CompileDiagnostics.model_validate({"graph_breaks": 0, "memory": {
        "compiled_device": compiled_device * MIB, "eager_device": eager_device * MIB}})


def test_compile_that_no_longer_saves_device_memory_is_said_not_judged() -> None:
    v = verdict(result(memory(60, 100)), result(memory(120, 100)))
    assert v.verdict == Verdict.identical  # a note: `heavier` judges the peaks themselves
    note = ("compiling no longer saves device memory: the compiled training peaks at 120.0 MiB"
            " against 100.0 MiB eager (baseline: 60.0 MiB against 100.0 MiB)")
    assert note in v.reasons and v.compile_diff.notes == [note]
    assert compile_rows(v.compile_diff) == [
        ("peak device memory, eager → compiled", "100.0 → 60.0 MiB", "100.0 → 120.0 MiB"),
    ]
    # Still saving, or never saving, or unknown on one side: nothing to say.
    for old, new in ((memory(60, 100), memory(90, 100)), (memory(120, 100), memory(130, 100)),
                     (memory(60, 100), CompileDiagnostics(graph_breaks=0))):
        assert compare_compile(old, new).notes == []
    one_sided = CompileDiagnostics.model_validate({"memory": {"compiled_device": 1}})
    assert compare_compile(memory(60, 100), one_sided).notes == []


def test_compile_memory_is_typed_and_absent_from_runs_without_it() -> None:
    written = {"graph_breaks": 0, "memory": {"compiled_device": 1, "eager_device": 2}}
    diagnostics = CompileDiagnostics.model_validate(json.loads(json.dumps(written)))
    assert diagnostics.memory is not None and diagnostics.memory.eager_device == 2
    assert diagnostics.model_dump(mode="json", exclude_defaults=True) == written
    assert "memory" not in CompileDiagnostics(graph_breaks=0).model_dump(mode="json")


# Which venvs share a compile cache: a venv here is its site-packages' METADATA files

REQUIRES = {  # what each distribution's METADATA requires, markers and extras as torch writes them
    "torch": ["filelock", "sympy>=1.13.3", "networkx>=2.5.1",
              'triton==3.5.0; platform_system == "Linux"',
              'nvidia-cublas==13.0; platform_system == "Windows"',
              'opt-einsum>=3.3; extra == "opt-einsum"'],
    "sympy": ["mpmath<1.4,>=1.1.0"],
    "networkx": ['numpy>=1.25; extra == "default"', "lg-fast-graphs; python_version < '3'"],
    "jax": ["jaxlib<=0.9.2,>=0.9.2", "numpy>=1.26", 'jax-cuda13-plugin; extra == "cuda13"'],
}


def fake_venv(root: Path, pins: dict[str, str], header: str = "") -> Path:
    """A venv holding `pins` {name: version} as dist-info folders with their METADATA; the
    description after the header quotes a Requires-Dist line of a pinned name."""
    site = root / "lib" / "python3.11" / "site-packages"
    for name, version in pins.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [header] if header else []
        lines += [f"Requires-Dist: {r}" for r in REQUIRES.get(name, [])]
        (info / "METADATA").write_text("\n".join(lines) + "\n\nRequires-Dist: lg-model\n")
    return root


def lock_of(pins: dict[str, str], hashed: bool = True, rebuilt: str = "", extras: str = ""):
    """A requirements lock of `pins`, each hashed unless not `hashed` (`rebuilt`: a pin whose
    files are other ones of the same version; `extras`: torch's and jax's, as `[a,b]`)."""
    def line(name: str, version: str) -> str:
        files = name + version + ("rebuilt" if name == rebuilt else "")
        digest = f" --hash=sha256:{hashlib.sha256(files.encode()).hexdigest()}" if hashed else ""
        return f"{name}{extras if name in ('torch', 'jax') else ''}=={version}{digest}\n"
    return parse_lock_text("".join(line(*pin) for pin in pins.items()), "requirements.txt")


def cache_of(tmp_path: Path, name: str, pins: dict[str, str], header: str = "",
             tag: str = "cpython 3.11.7 x86_64", **kwargs) -> tuple[Path, bool]:
    venv = fake_venv(tmp_path / name, pins, header)
    return compile_cache_dir(tmp_path, venv, name, lock_of(pins, **kwargs), tag,
                             share=True)


TORCH = {"torch": "2.13.0", "filelock": "3.20.0", "sympy": "1.14.0", "mpmath": "1.3.0",
         "networkx": "3.6.1", "triton": "3.5.0", "nvidia-cublas": "13.0", "opt-einsum": "3.4.0",
         "numpy": "2.3.4", "lg-model": "1.0", "lg-fast-graphs": "1.0"}


def test_venvs_share_a_compile_cache_when_the_compilers_closure_is_pinned_alike(
        tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v", TORCH)
    # torch and what it requires through one another, where the marker holds and the extra is
    # asked for; not what only the training imports (the model, numpy), nor the description.
    assert compiler_closure(venv, lock_of(TORCH)) == {
        "torch", "filelock", "sympy", "mpmath", "networkx", "triton"}
    assert compiler_closure(venv, lock_of(TORCH, extras="[opt-einsum]")) == {
        "torch", "filelock", "sympy", "mpmath", "networkx", "triton", "opt-einsum"}
    shared, is_shared = cache_of(tmp_path, "a", TORCH)
    assert is_shared and shared.name.startswith("compilers-") and shared.parent == tmp_path
    # A model library, numpy, a package for another platform moved: the same cache.
    for moved in ("lg-model", "numpy", "nvidia-cublas", "opt-einsum", "lg-fast-graphs"):
        assert cache_of(tmp_path, f"b-{moved}", {**TORCH, moved: "9.9"}) == (shared, True), moved
    # The compiler moved, or what it requires, however deep: another cache.
    for moved in ("torch", "mpmath", "triton", "networkx"):
        assert cache_of(tmp_path, f"c-{moved}", {**TORCH, moved: "9.9"})[0] != shared, moved
    # The same versions, other files (another hash); another interpreter: another cache.
    assert cache_of(tmp_path, "d", TORCH, rebuilt="sympy")[0] != shared
    assert cache_of(tmp_path, "e", TORCH, rebuilt="lg-model")[0] == shared
    assert cache_of(tmp_path, "f", TORCH, tag="cpython 3.12.1 x86_64")[0] != shared
    jax = {"jax": "0.9.2", "jaxlib": "0.9.2", "numpy": "2.3.4", "scipy": "1.16",
           "jax-cuda13-plugin": "0.9.2"}
    assert compiler_closure(fake_venv(tmp_path / "j", jax), lock_of(jax)) == {
        "jax", "jaxlib", "numpy"}
    assert "jax-cuda13-plugin" in compiler_closure(tmp_path / "j", lock_of(jax, extras="[cuda13]"))


def test_a_compile_cache_stays_the_venvs_own_when_its_compilers_are_not_known_alike(
        tmp_path: Path) -> None:
    own = (tmp_path / "a.compile-cache", False)
    # Nothing compiles (numpy is a framework of lockguard's, not a compiler).
    assert cache_of(tmp_path, "a", {"numpy": "2.3.4"}) == own
    # A lock without hashes (allow_unhashed): a version does not fix its files.
    assert cache_of(tmp_path, "u", TORCH, hashed=False) == (tmp_path / "u.compile-cache", False)
    # A METADATA that cannot be read, a requirement that does not parse, a pin whose marker
    # holds but the venv lacks: the closure is unknown.
    for damage in ("unreadable", "unparsed", "missing"):
        venv = fake_venv(tmp_path / damage, TORCH)
        info = next(venv.rglob("sympy-*.dist-info"))
        if damage == "unreadable":
            (info / "METADATA").write_bytes(b"Requires-Dist: \xff\n")
        elif damage == "unparsed":
            (info / "METADATA").write_text("Requires-Dist: mpmath (<<1)\n")
        else:
            shutil.rmtree(info)
        assert compiler_closure(venv, lock_of(TORCH)) is None, damage
        assert compile_cache_dir(tmp_path, venv, damage, lock_of(TORCH), "t",
                                 share=True) == (
            tmp_path / f"{damage}.compile-cache", False), damage
    # A pin whose marker leaves it out here need not be installed.
    venv = fake_venv(tmp_path / "marker", {k: v for k, v in TORCH.items() if k != "triton"})
    elsewhere = ' ; sys_platform == "win32"'
    lock = parse_lock_text("".join(
        f"{p.name}=={p.version}{elsewhere if p.name == 'triton' else ''} --hash={p.hashes[0]}\n"
        for p in lock_of(TORCH).pins), "requirements.txt")
    assert "triton" in compiler_closure(venv, lock)


def test_only_a_bisection_shares_compile_caches_and_each_project_writes_its_own(
        tmp_path: Path, monkeypatch) -> None:
    """A training writes the compile cache it runs with, so no cache is shared between the two
    sides of an A/B (the candidate's code would plant the baseline's kernels): the venv backend
    shares only when asked, and only bisection asks. A user scenario's script writes a folder
    of its own project's, never the environment's or another project's."""
    from lockguard.envs import backend_for
    from lockguard.envs.base import RunRequest, compile_cache_for
    from lockguard.flows import bisect, pipeline

    venv = fake_venv(tmp_path / "a", TORCH)
    assert compile_cache_dir(tmp_path, venv, "a", lock_of(TORCH), "t", share=False) == (
        tmp_path / "a.compile-cache", False)
    assert compile_cache_dir(tmp_path, venv, "a", lock_of(TORCH), "t", share=True)[1] is True
    assert backend_for("venv").share_compile_caches is False
    assert backend_for("venv", share_compile_caches=True).share_compile_caches is True

    asked = []
    real = pipeline.run_backend

    def spy(settings, given=None, **kwargs):
        asked.append(kwargs)
        return real(settings, given, **kwargs)

    monkeypatch.setattr(bisect, "run_backend", spy)
    old_lines, new_lines = "six==1.0\nnumpy==1.26.4\n", "six==1.1\nnumpy==2.0.2\n"
    (tmp_path / "old.txt").write_text(old_lines)
    (tmp_path / "new.txt").write_text(new_lines)
    from fakes import FakeBackend
    from lockguard.config import Config, Options
    from lockguard.flows.ab import check_ab
    from lockguard.locks.ref import LockRef, read_lock
    from lockguard.scenarios import bundled
    from lockguard.settings import Settings

    NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]

    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    refs = [LockRef(tmp_path / n, read_lock(tmp_path / n)) for n in ("new.txt", "old.txt")]
    check_ab(Settings.resolve(config, Options(bisect=True)), [refs[0]], [refs[1]], NUMPY,
             backend=FakeBackend())
    assert asked == [{"share_compile_caches": True}]

    def request(script=None, project=None):
        return RunRequest("s", "torch", 2, 0, "cpu", 1, 60.0, script=script, project=project)

    root = tmp_path / "env.compile-cache"
    assert compile_cache_for(root, request()) == root
    mine = compile_cache_for(root, request(tmp_path / "p" / "s.py", tmp_path / "p"))
    theirs = compile_cache_for(root, request(tmp_path / "q" / "s.py", tmp_path / "q"))
    assert mine.parent == theirs.parent == root / "projects" and mine != theirs


def test_a_folded_field_s_blank_lines_do_not_end_the_metadata_header(tmp_path: Path) -> None:
    folded = "License: BSD\n        \n        Copyright (c) the authors\n        "
    venv = fake_venv(tmp_path / "v", TORCH, header=folded)
    assert "mpmath" in compiler_closure(venv, lock_of(TORCH))


def test_a_shared_compile_cache_goes_without_torch_s_autograd_cache() -> None:
    assert compile_cache_env("/c", shared=True)["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "0"
    assert "TORCHINDUCTOR_AUTOGRAD_CACHE" not in compile_cache_env("/c")
    for shared in (False, True):  # no run reads a profile another left
        assert compile_cache_env("/c", shared)["TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO"] == "0"


# --------------------------------------------------------------------------------------------
# Inductor's precompiled headers: below a run's own TMPDIR, kept in the compile cache


def test_a_runs_precompiled_headers_are_linked_into_its_compile_cache(tmp_path):
    from lockguard.envs.base import _keep_precompiled_headers

    cache = tmp_path / "cache" / "inductor"
    run_tmp = tmp_path / "run" / "tmp"
    run_tmp.mkdir(parents=True)
    # The name torch gives the folder: getpass's, in the run's environment; its characters
    # that cannot be in a path replaced as torch replaces them.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "USER": "ci:runner", "LOGNAME": ""}
    _keep_precompiled_headers(run_tmp, env)
    link = run_tmp / "torchinductor_ci_runner" / "precompiled_headers"
    assert link.is_symlink() and link.resolve() == (cache / "precompiled_headers").resolve()
    (link / "h.gch").write_text("compiled once")
    shutil.rmtree(tmp_path / "run")  # the run's folder goes with the run
    assert (cache / "precompiled_headers" / "h.gch").read_text() == "compiled once"

    # A run without an inductor cache of lockguard's keeps torch's default: nothing linked.
    bare = tmp_path / "bare"
    bare.mkdir()
    _keep_precompiled_headers(bare, {"LOGNAME": "someone"})
    assert list(bare.iterdir()) == []


def test_a_relative_cache_is_linked_by_its_absolute_path(tmp_path, monkeypatch):
    from lockguard.envs.base import _keep_precompiled_headers

    monkeypatch.chdir(tmp_path)  # LOCKGUARD_CACHE=relcache: the compile cache is relative
    run_tmp = tmp_path / "run" / "tmp"
    run_tmp.mkdir(parents=True)
    _keep_precompiled_headers(run_tmp, {"TORCHINDUCTOR_CACHE_DIR": "relcache/inductor",
                                        "LOGNAME": "ci"})
    link = run_tmp / "torchinductor_ci" / "precompiled_headers"
    assert Path(os.readlink(link)).is_absolute()
    (link / "locks").mkdir(exist_ok=True)  # what torch does first, through the link
    assert (tmp_path / "relcache" / "inductor" / "precompiled_headers" / "locks").is_dir()


def test_a_runs_tmpdir_is_its_own_only_where_a_socket_still_fits_below_it(tmp_path):
    from lockguard.envs.base import own_temp_dir

    given = {"TMPDIR": "/the/callers", "LOGNAME": "ci"}
    short = tmp_path / "0"
    short.mkdir()
    deep = tmp_path / ("d" * 120) / "0"
    deep.mkdir(parents=True)
    env = own_temp_dir(short, given)
    if len(str(short / "tmp")) + 40 <= 103:  # pytest's own tmp_path may be long already
        assert env["TMPDIR"] == str(short / "tmp") and (short / "tmp").is_dir()
    # DataLoader workers talk through <TMPDIR>/pymp-XXXXXXXX/listener-XXXXXXXX: past a Unix
    # socket's 103 bytes they fail and the loader waits; the run keeps the TMPDIR it had.
    assert own_temp_dir(deep, given) == given and not (deep / "tmp").exists()


def test_the_compile_accuracy_check_reads_as_a_sentence() -> None:
    """The HTML report's compile diagnostics say the accuracy check in words, not its JSON."""
    from lockguard.compare.compile import accuracy_text
    from lockguard.results import AccuracyCheck

    passed = AccuracyCheck(ok=True, series={"losses": {"compiled_vs_fp64": 1.2e-7,
                                                       "eager_vs_fp64": 1.1e-7,
                                                       "limit": 3.3e-7}})
    assert accuracy_text(passed) == ("passed: losses 1.2e-07 from fp64 (eager 1.1e-07, "
                                     "limit 3.3e-07)")
    assert accuracy_text(AccuracyCheck(ok=False)) == "failed: no series checked"


def test_the_bytecode_store_is_one_switch_from_the_config_to_the_venv_backend(tmp_path) -> None:
    """share_bytecode (on unless the config says false, a literal bool) reaches the venv
    backend through Settings and pipeline.run_backend, for every flow alike."""
    import pytest
    from pydantic import ValidationError

    from lockguard.config import Config
    from lockguard.flows.pipeline import run_backend
    from lockguard.settings import Settings

    for given, expected in (({}, True), ({"share_bytecode": False}, False)):
        settings = Settings.resolve(Config(root=tmp_path, **given))
        assert settings.share_bytecode is expected
        assert run_backend(settings).share_bytecode is expected
        assert run_backend(settings, share_compile_caches=True).share_bytecode is expected
    with pytest.raises(ValidationError):
        Config(root=tmp_path, share_bytecode="no")


def test_requires_keeps_markers_and_extras_and_tells_an_unread_metadata(tmp_path) -> None:
    from lockguard.envs.installed import requires

    venv = fake_venv(tmp_path / "v", TORCH)
    metadata = next(venv.rglob("torch-*.dist-info")) / "METADATA"
    assert requires(metadata) == tuple(REQUIRES["torch"])  # the description's line left out
    assert requires(next(venv.rglob("filelock-*.dist-info")) / "METADATA") == ()
    metadata.unlink()
    assert requires(metadata) is None
    metadata.mkdir()
    assert requires(metadata) is None


def test_a_break_location_is_one_printable_line_however_the_environment_names_things() -> None:
    """A class or file name is the environment's to choose: the harness cuts each to one
    printable line, and results.BreakLocation refuses anything else on arrival."""
    import pydantic

    from lockguard.harness._lockguard_harness import break_layer
    from lockguard.results import BreakLocation

    hostile = "Evil\n\x1b[2J" + "x" * 500
    cut = break_layer.cut(hostile)
    assert "\n" not in cut and "\x1b" not in cut and len(cut) == break_layer.MAX_TEXT
    BreakLocation(reason=break_layer.cut("site: " + hostile, 400), file=cut, module_class=cut)
    for field in ("reason", "file", "function", "module", "module_class", "method"):
        with pytest.raises(pydantic.ValidationError):
            BreakLocation.model_validate({"reason": "r", "file": "f", field: "a\nb"})


def test_a_long_break_reason_is_cut_alike_where_it_is_listed_and_where_it_is_placed(
        monkeypatch) -> None:
    """break_locations are matched to break_reasons by their text (compare.compile): a
    'site: reason' past the contract's 400 characters (a deep site path) is cut the same way in
    both, so its place is kept."""
    monkeypatch.setattr(ct, "_break_site", lambda text: "deep/" * 80 + "layer.py:forward")
    recorder = ct.Recorder()
    recorder.capture.breaks.append(BREAK_RECORD)
    recorder.capture.break_places.append({"file": "lg_testlayer/__init__.py", "line": 14})
    located = recorder._located_breaks({COUNTER_KEY: 1})
    reasons = ct._reasons(located)
    assert reasons and all(len(r) == 400 and r.endswith("…") for r in reasons), reasons
    placed = [r for r, place in located if place]
    assert placed and all(r in reasons for r in placed)
