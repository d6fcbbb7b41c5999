"""The operation inside the module where a torch drift starts (compare/locate.operation, the
harness's locate_torch.py `operations`): each side's aten operations of the located call's own
code, the first that computes a value the other side never did. Fast: captures built here op by
op, every expected figure worked out by hand (in float32, 2.0 + k·2**-22 is k ULPs above 2.0),
the validation that refuses a hostile capture, and the A/B flow on the fake backend. Slow, in
the suite's real torch venvs: the harness's recorder on a script's model (own operations only,
views marked, bounded), and transformers 4.40.2 → 4.46.3's GPT-2 attention, where the eager
code's operations and sdpa's fused kernel part."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import struct
import subprocess

import pytest

import fakes
from conftest import DATA, FRAMEWORK_LOCKS, REPO, lockguard_python
from fakes import FakeBackend, capture_for, lock
from lockguard.compare.locate import locate, operation
from lockguard.config import Config
from lockguard.flows.ab import check_ab
from lockguard.names import FORMATS
from lockguard.report import render
from lockguard.results import (
    MAX_CALL_OPS, MAX_CAPTURE_OPS, OP_NAME, SCHEMA_VERSION, CallOperations, Capture, ResultError,
    parse_result,
)
from lockguard.scenarios import bundled
from lockguard.settings import Settings

ULP2 = 2.0 ** -22


def tensor(values: list[float]) -> dict:
    """A captured float32 tensor (locate_torch._describe's form)."""
    raw = struct.pack(f"<{len(values)}f", *values)
    return {"digest": hashlib.sha256(raw).hexdigest(), "dtype": "float32",
            "shapes": [[len(values)]], "numel": len(values),
            "sample": base64.b64encode(raw).decode("ascii")}


def op(name: str, values: list[float] | None, inputs: str = "x", view: bool = False) -> dict:
    """A recorded operation; `inputs` "" for one given no tensor (a factory: aten.full)."""
    found = {"name": name, "inputs": hashlib.sha256(inputs.encode()).hexdigest(),
             "out": tensor(values) if values is not None else None}
    return {**found, "view": True} if view else found


def ops(*items: dict, truncated: bool = False, error: str | None = None) -> CallOperations:
    return CallOperations.model_validate({"ops": list(items), "truncated": truncated,
                                          "error": error})


# A linear layer's own operations: the weight transposed (a view), then addmm
LINEAR = [op("aten.t.default", [0.5, 0.25], "w", view=True)]


def test_the_same_operation_with_another_output_on_equal_inputs_is_named_with_its_ulps():
    old = ops(*LINEAR, op("aten.addmm.default", [1.0, 2.0, 3.0], "xw"),
              op("aten.relu.default", [1.0, 2.0, 3.0], "h"))
    new = ops(*LINEAR, op("aten.addmm.default", [1.0, 2.0 + 3 * ULP2, 3.0], "xw"),
              op("aten.relu.default", [1.0, 2.0 + 3 * ULP2, 3.0], "h'"))
    found = operation(old, new)
    assert (found.kind, found.baseline_index, found.candidate_index) == ("output", 1, 1)
    assert (found.baseline_ops, found.max_ulp) == (["aten.addmm.default"], 3)
    assert found.recorded == (3, 3) and not found.truncated
    assert found.sentence() == ("the first operation whose output differs is aten.addmm.default "
                                "(op 1), by max 3 ulp on equal inputs (its forward replayed)")
    # the same operation on inputs that differ is no output difference: the sides part there
    other = ops(*LINEAR, op("aten.addmm.default", [1.0, 2.0 + 3 * ULP2, 3.0], "xw'"),
                op("aten.relu.default", [1.0, 2.0 + 3 * ULP2, 3.0], "h'"))
    assert operation(old, other).kind == "parted"
    # an integer output (argmax's indices) has no ULPs: its values differ
    index = {**op("aten.argmax.default", None, "h"), "out": {**tensor([1.0, 2.0]),
                                                               "dtype": "int64"}}
    moved = {**index, "out": {**tensor([1.0, 3.0]), "dtype": "int64"}}
    found = operation(ops(index), ops(moved))
    assert (found.kind, found.max_ulp, found.dtype) == ("output", None, "int64")
    assert found.sentence() == ("the first operation whose output differs is "
                                "aten.argmax.default (op 0), in int64 values (no ULPs) on equal "
                                "inputs (its forward replayed)")


def test_operations_that_part_name_each_sides_run_until_a_common_value():
    """Eager attention against sdpa: the q, k, v views are common, then the baseline runs
    bmm, div, softmax, bmm where the candidate runs one fused operation; a copy the candidate
    adds (`clone` of a value the baseline has), views and a constant (aten.full, given no
    tensor: the scale) are no difference. A view of a common value (v) is no meeting."""
    qkv = [op("aten.split.Tensor", [1.0, 2.0, 3.0]), op("aten.view.default", [1.0], view=True)]
    old = ops(*qkv, op("aten.transpose.int", [2.0], view=True), op("aten.bmm.default", [5.0]),
              op("aten.full.default", [4.0], ""), op("aten.div.Tensor", [1.25]),
              op("aten.expand.default", [1.0, 2.0, 3.0], view=True),
              op("aten._softmax.default", [0.25]),
              op("aten.bmm.default", [0.75]), op("aten.view.default", [0.5], view=True),
              op("aten.addmm.default", [9.0]), op("aten.add.Tensor", [4.0]),
              op("aten.mul.Tensor", [8.0]))
    new = ops(*qkv, op("aten.clone.default", [1.0, 2.0, 3.0], view=True),
              op("aten._scaled_dot_product_flash_attention_for_cpu.default", [0.75 + ULP2]),
              op("aten.view.default", [0.5 + ULP2], view=True), op("aten.addmm.default", [9.5]))
    found = operation(old, new)
    assert (found.kind, found.baseline_index, found.candidate_index) == ("parted", 3, 3)
    assert found.baseline_ops == ["aten.bmm.default", "aten.div.Tensor", "aten._softmax.default",
                                  "aten.bmm.default", "aten.addmm.default"]
    assert found.candidate_ops == ["aten._scaled_dot_product_flash_attention_for_cpu.default",
                                   "aten.addmm.default"]
    assert found.sentence() == (
        "its operations differ from op 3: baseline aten.bmm.default (then aten.div.Tensor, "
        "aten._softmax.default, aten.bmm.default …), candidate "
        "aten._scaled_dot_product_flash_attention_for_cpu.default (then aten.addmm.default) "
        "(its forward replayed)")
    # the indices differ when a side runs more before: each is said
    shifted = ops(*qkv, op("aten.view.default", [7.0], view=True), *new.model_dump()["ops"][2:])
    assert operation(old, shifted).sentence().startswith(
        "its operations differ from baseline op 3, candidate op 4: baseline aten.bmm.default")


def test_a_fused_operation_meets_the_others_value_and_one_side_may_compute_nothing_new():
    """The baseline's mul then add against the candidate's addcmul, to the same bits: the
    baseline's product is its own value (named), the sum common (where the run stops);
    the candidate computed nothing the baseline did not until its last mul, on other inputs
    than the baseline's first mul (the same name elsewhere is no output difference)."""
    old = ops(op("aten.mul.Tensor", [2.0], "a"), op("aten.add.Tensor", [3.0], "b"),
              op("aten.tanh.default", [0.5], "c"), op("aten.mul.Tensor", [1.0], "d"))
    new = ops(op("aten.addcmul.default", [3.0], "a"), op("aten.tanh.default", [0.5], "c"),
              op("aten.mul.Tensor", [1.0 + ULP2], "d"))
    found = operation(old, new)
    assert (found.kind, found.baseline_index, found.candidate_index) == ("parted", 0, 2)
    assert (found.baseline_ops, found.candidate_ops) == (["aten.mul.Tensor"],
                                                         ["aten.mul.Tensor"])
    # a side that only computes values the other also computed: nothing of its own
    extra = ops(op("aten.mul.Tensor", [2.0], "a"), op("aten.exp.default", [7.0], "e"),
                op("aten.add.Tensor", [3.0], "b"), op("aten.tanh.default", [0.5], "c"),
                op("aten.mul.Tensor", [1.0], "d"))
    found = operation(old, extra)
    assert (found.kind, found.baseline_index, found.candidate_index) == ("parted", None, 1)
    assert found.sentence() == ("its operations differ from candidate op 1: the candidate runs "
                                "aten.exp.default, values the baseline never computes (its "
                                "forward replayed)")
    found = operation(extra, old)
    assert found.sentence().startswith("its operations differ from baseline op 1: the baseline "
                                       "runs aten.exp.default, values the candidate never")


def test_equal_operations_an_uninitialised_output_and_a_failed_replay():
    same = ops(op("aten.empty.memory_format", None), *LINEAR,
               op("aten.addmm.default", [1.0, 2.0]))
    found = operation(same, copy.deepcopy(same))
    assert found.kind == "equal" and found.recorded == (3, 3)
    assert found.sentence() == ("its own operations (the 3 recorded of its forward) compute the "
                                "same values on both sides: the difference comes from a module "
                                "inside it")
    cut = ops(*same.model_dump()["ops"], truncated=True)
    # all recorded equal, but one side stopped recording: nothing said of the rest
    assert "budget was spent" in operation(cut, same).sentence()
    failed = ops(error="RuntimeError: boom", truncated=True)
    assert operation(same, failed).sentence() == ("its operations could not be recorded: "
                                                  "RuntimeError: boom")
    assert operation(same, None) is None and operation(None, None) is None
    assert operation(ops(), ops()).sentence() == (
        "its own code runs no operation on either side (a container: the difference comes "
        "from a module inside it)")


def with_operations(capture: dict, version_ulps: int) -> dict:
    """capture_for's capture with fc2's own operations: the weight's view, then the addmm whose
    output is fc2's, `version_ulps` ULPs moved."""
    capture = copy.deepcopy(capture)
    fc2 = capture["calls"][2]
    fc2["operations"] = {"ops": [op("aten.t.default", [0.5], "w", view=True),
                                 op("aten.addmm.default", [1.0, 2.0 + version_ulps * ULP2])],
                         "truncated": False}
    return capture


def test_a_forward_location_names_its_operation_after_the_module():
    old = Capture.model_validate(with_operations(capture_for("2.13.0", 3), 0))
    new = Capture.model_validate(with_operations(capture_for("2.14.1", 3), 5))
    loc = locate(old, new)
    assert (loc.kind, loc.module) == ("forward", "fc2") and loc.operation is not None
    assert (loc.operation.kind, loc.operation.max_ulp) == ("output", 5)
    where, what, *_ = loc.sentences()
    assert where.startswith("the drift starts in fc2 (Linear) at step 3")
    assert what == ("the first operation whose output differs is aten.addmm.default (op 1), "
                    "by max 5 ulp on equal inputs (its forward replayed)")
    # a gradient location names none: the operations are the forward's
    grad = capture_for("2.13.0", 2)
    grad["calls"][1]["grad"] = capture_for("2.14.1", 2)["calls"][1]["grad"]
    loc = locate(Capture.model_validate(with_operations(capture_for("2.13.0", 2), 0)),
                 Capture.model_validate(with_operations(grad, 0)))
    assert loc.kind == "gradient" and loc.operation is None


def test_the_operation_is_in_every_report_format_and_the_json(tmp_path, monkeypatch):
    shifts = {"2.13.0": 0, "2.14.1": 7}
    monkeypatch.setattr(fakes, "capture_for", lambda version, step: with_operations(
        capture_for(version, step), shifts[version]))
    old = lock(tmp_path, "old.txt", "torch==2.13.0\nnumpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "torch==2.14.1\nnumpy==1.26.4\n")
    mlp = [s for s in bundled() if s.id == "torch.mlp"]
    report = check_ab(Settings.resolve(Config(root=tmp_path, golden_dir="golden", steps=6)),
                      [new], [old], mlp, backend=FakeBackend())
    [v] = report.verdicts
    assert v.location is not None and v.location.operation.kind == "output", v.reasons
    for fmt in FORMATS:  # the text format wraps its lines
        assert ("the first operation whose output differs is aten.addmm.default (op 1), by max "
                "7 ulp") in " ".join(render(report, fmt).split()), fmt
    data = json.loads(render(report, "json"))
    [where] = [s["location"] for s in data["verdicts"]]
    assert where["operation"]["kind"] == "output"
    assert where["operation"]["baseline_ops"] == ["aten.addmm.default"]


def hostile(change) -> dict:
    capture = with_operations(capture_for("2.13.0", 3), 1)
    change(capture["calls"][2]["operations"])
    return {"schema_version": SCHEMA_VERSION, "scenario": "torch.mlp", "framework": "torch",
            "steps": 4, "losses": [1.0] * 4, "capture": capture}


@pytest.mark.parametrize("change, message", [
    # a name a report prints: one line, an operator's characters only
    (lambda o: o["ops"][1].update(name="aten.addmm\x1b]8;;http://x\x07"), "name"),
    (lambda o: o["ops"][1].update(name="aten addmm\n- forged"), "name"),
    (lambda o: o["ops"][1].update(inputs="x" * 64), "inputs"),
    (lambda o: o["ops"][1]["out"].update(sample=base64.b64encode(b"\0" * 4 * 65).decode()),
     "keeps more than 64 values"),
    (lambda o: o.update(ops=o["ops"] * (MAX_CALL_OPS // 2 + 1)), "at most 256 items"),
    (lambda o: o.update(extra=1), "extra"),
    (lambda o: o.update(error="x" * 401), "error"),
])
def test_a_hostile_capture_of_operations_is_refused_on_arrival(change, message):
    with pytest.raises(ResultError, match=message):
        parse_result(hostile(change), "result.json")


def test_a_capture_holding_more_operations_than_its_budget_is_refused():
    capture = with_operations(capture_for("2.13.0", 3), 1)
    many = {"ops": [op("aten.add.Tensor", [float(k)]) for k in range(MAX_CALL_OPS)],
            "truncated": True}
    template = capture["calls"][1]
    capture["calls"] = [capture["calls"][0]] + [
        dict(template, name=f"fc{k}", operations=many)
        for k in range(MAX_CAPTURE_OPS // MAX_CALL_OPS + 1)]
    data = {"schema_version": SCHEMA_VERSION, "scenario": "torch.mlp", "framework": "torch",
            "steps": 4, "losses": [1.0] * 4, "capture": capture}
    with pytest.raises(ResultError, match=f"more than {MAX_CAPTURE_OPS} operations"):
        parse_result(data, "result.json")
    capture["calls"] = capture["calls"][:MAX_CAPTURE_OPS // MAX_CALL_OPS + 1]
    assert parse_result(data, "result.json").capture is not None


def test_the_harness_writes_within_the_bounds_the_host_reads():
    """The harness (which cannot import lockguard) and results.py each hold the bounds: the
    harness's may not exceed what the host accepts, or a real capture would be refused."""
    import ast

    from lockguard import results

    source = REPO / "lockguard" / "harness" / "_lockguard_harness" / "locate_torch.py"
    harness = {node.targets[0].id: ast.literal_eval(node.value)
               for node in ast.parse(source.read_text()).body
               if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
               and node.targets[0].id.isupper() and isinstance(node.value, ast.Constant)}
    assert harness["MAX_OPS"] == results.MAX_CALL_OPS
    assert harness["MAX_CAPTURE_OPS"] == results.MAX_CAPTURE_OPS
    assert harness["OP_SAMPLE"] <= results.MAX_OP_SAMPLE
    assert harness["MAX_CALLS"] == results.MAX_CAPTURE_CALLS
    assert harness["SAMPLE"] <= results.MAX_CAPTURE_SAMPLE
    fields = {"shapes": results.CapturedTensor.model_fields["shapes"],
              "name": results.CapturedOp.model_fields["name"]}
    limit = {k: next(m.max_length for m in f.metadata if hasattr(m, "max_length"))
             for k, f in fields.items()}
    assert harness["MAX_SHAPES"] <= limit["shapes"]
    assert harness["MAX_OP_NAME"] <= limit["name"]
    # the harness cleans an operation's name to the characters the host's pattern accepts
    assert results.OP_NAME == f"^[{harness['OP_NAME_CHARS']}]+$"


# ------------------------------------------------------------------- the real harness (slow)

RECORDER = """
import json, sys
import torch
from _lockguard_harness import locate_torch

class Scaled(torch.nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.fused = fused

    def forward(self, x):
        h = self.proj(x).view(2, 4, 8) * 0.3
        if not self.fused:  # another temperature: each value differs, whatever the CPU
            h = h + 0.001
        return torch.nn.functional.softmax(h, dim=-1)

class Many(torch.nn.Module):
    def forward(self, x):
        for _ in range(300):
            x = x + 1
        return x

torch.manual_seed(0)
x = torch.randn(8, 8)
out = {}
for side in ("eager", "fused"):
    torch.manual_seed(1)
    model = torch.nn.Sequential(Scaled(side == "fused"), Many())
    capture = locate_torch.Capture(0, probe=True)
    capture.attach(model)
    with torch.no_grad():
        model(x)
    out[side] = capture.finish()
json.dump(out, open(sys.argv[1], "w"))
"""


def in_harness(tmp_path, source: str) -> dict:
    """`source`, a script that writes JSON to the path it is given, run in the suite's torch
    venv with the harness's package importable (as the harness's process has it): the JSON."""
    script, out = tmp_path / "script.py", tmp_path / "out.json"
    script.write_text(source)
    proc = subprocess.run([str(lockguard_python(FRAMEWORK_LOCKS["torch"])), str(script),
                           str(out)], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin",
                               "PYTHONPATH": str(REPO / "lockguard" / "harness")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_harness_records_each_calls_own_operations_views_marked_and_bounded(tmp_path):
    """torch 2.13.0 (the suite's torch venv), the harness's Capture in process: two versions
    of a module, one adding an offset before its softmax; each call's own operations only (the
    Sequential runs none of its own, the Linear's addmm is the Linear's, not its parent's), the
    views marked, 300 additions cut at 256; compared, the sides part at the offset."""
    sides = {side: Capture.model_validate(capture) for side, capture
             in in_harness(tmp_path, RECORDER).items()}
    calls = {c.name: c for c in sides["eager"].calls}
    assert list(calls) == ["(model)", "0", "0.proj", "1"]
    assert calls["(model)"].operations.ops == [] and not calls["(model)"].operations.truncated
    proj = [o.name for o in calls["0.proj"].operations.ops]
    assert "aten.addmm.default" in proj, proj
    own = calls["0"].operations.ops
    assert "aten.addmm.default" not in [o.name for o in own]  # the child's, not its own
    assert [o.view for o in own if o.name == "aten.view.default"] == [True]
    assert all(o.out is not None and len(o.out.values()) <= 16 for o in own)
    many = calls["1"].operations
    assert len(many.ops) == MAX_CALL_OPS and many.truncated
    assert {o.name for o in many.ops} == {"aten.add.Tensor"}
    loc = locate(sides["eager"], sides["fused"])
    assert (loc.kind, loc.module, loc.same_inputs) == ("forward", "0", True), loc.sentences()
    found = loc.operation
    assert found is not None and found.kind == "parted", loc.sentences()
    # both multiply by 0.3 first (a common value); then the baseline's offset, and from there
    # each side's softmax of other values
    assert (found.baseline_index, found.candidate_index) == (2, 2), found
    assert found.baseline_ops == ["aten.add.Tensor", "aten._softmax.default"], found
    assert found.candidate_ops == ["aten._softmax.default"], found


EDGES = """
import copy, json, sys
import torch
from _lockguard_harness import locate_torch

class Rows(torch.nn.Module):  # aten.unbind: one output tensor a row, 100 of them
    def forward(self, x):
        return torch.stack([r * 2 for r in x.unbind(0)])

class Out(torch.nn.Module):  # an out= buffer of whatever bytes, then an operation on it
    def __init__(self, fill):
        super().__init__()
        self.fill = fill

    def forward(self, x):
        buf = torch.full_like(x, self.fill)
        torch.mul(x, 3.0, out=buf)
        return buf + 1

class Top(torch.nn.Module):  # (values, indices): the values' dtype and values only
    def forward(self, x):
        return x.max(dim=1).values * 1.0

def ops(model, x, spent=False):
    capture = locate_torch.Capture(0, probe=True)
    capture.attach(model)
    if spent:
        capture._ops = locate_torch.MAX_CAPTURE_OPS
    with torch.no_grad():
        model(x)
    return capture.finish()["calls"][0]["operations"]

out = {"rows": ops(Rows(), torch.randn(100, 3)),
       "out": [ops(Out(fill), torch.ones(4)) for fill in (0.0, 7.0)],
       "top": ops(Top(), torch.randn(4, 5))}
copies = []
real = copy.deepcopy
copy.deepcopy = lambda *a, **k: copies.append(1) or real(*a, **k)
out["spent"] = ops(Rows(), torch.randn(2, 3), spent=True)
copy.deepcopy = real
out["spent_copies"] = len(copies)  # the referee's two, not the operations' replay
out["name"] = locate_torch.op_name("mylib.fused\x1b[31m op.default" + "x" * 300)
out["float8"] = locate_torch._describe([torch.ones(4).to(torch.float8_e4m3fn)])
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.mark.slow
def test_the_harness_keeps_an_operations_capture_within_the_hosts_bounds(tmp_path):
    """torch 2.13.0, the harness in process: an unbind's 100 outputs list 64 shapes (numel
    counts all), an operation's name is cleaned to results.OP_NAME, an out= buffer's bytes are
    not in the inputs digest, max.dim's sample is its float values (not its indices), a float8
    output is not sampled, and a capture whose budget is spent replays nothing."""
    got = in_harness(tmp_path, EDGES)
    rows = CallOperations.model_validate(got["rows"])  # within the host's bounds
    unbind = next(o for o in rows.ops if o.name.startswith("aten.unbind"))
    assert unbind.out is not None and len(unbind.out.shapes) == 64 and unbind.out.numel == 300
    first, second = (CallOperations.model_validate(o).ops for o in got["out"])
    assert [o.name for o in first] == [o.name for o in second]
    after = [o.inputs for o in first if o.name == "aten.add.Tensor"]
    assert after and after == [o.inputs for o in second if o.name == "aten.add.Tensor"]
    muls = [(a.inputs, b.inputs) for a, b in zip(first, second) if a.name.startswith("aten.mul")]
    assert muls and all(a == b for a, b in muls)  # the buffer's fill is not an input
    top = CallOperations.model_validate(got["top"]).ops
    found = next(o for o in top if o.name == "aten.max.dim")
    assert found.out is not None and found.out.dtype == "float32"
    assert len(found.out.values()) == 4 and found.out.numel == 8
    assert got["spent"] == {"ops": [], "truncated": True} and got["spent_copies"] == 2
    assert re.fullmatch(OP_NAME, got["name"]) and len(got["name"]) == 200
    assert got["name"].startswith("mylib.fused__31m_op.default")
    assert got["float8"]["sample"] == "" and got["float8"]["dtype"] == "float8_e4m3fn"


EAGER_SDPA = {v: DATA / f"torch-2.13.0-transformers-{v}.txt" for v in ("4.40.2", "4.46.3")}


@pytest.mark.slow
def test_gpt2_eager_and_sdpa_attention_part_at_the_fused_kernel(tmp_path):
    """transformers 4.40.2 → 4.46.3 (torch 2.13.0; the venvs of test_model_libraries' sdpa
    case): the probe of transformers.gpt2 after 2 training steps (equal on both sides: the
    training runs SDPA's math path) captured on each side, as the A/B's localisation runs do.
    The location is a layer's attention, and inside it the sides part: the eager code's
    operations against SDPA's fused CPU kernel. Not asserted: the ULPs, or which op index
    (other transformers code around it)."""
    captures = {}
    for version, path in EAGER_SDPA.items():
        out = tmp_path / f"{version}.json"
        proc = subprocess.run([str(lockguard_python(path)),
                               str(REPO / "lockguard" / "harness" / "run.py"), "--scenario",
                               "transformers.gpt2", "--steps", "2", "--locate-step", "2",
                               "--out", str(out)], capture_output=True, text=True,
                              timeout=600, env={"PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        result = parse_result(json.loads(out.read_text()), out.name)
        assert result.status == "ok" and result.capture is not None, result.error
        captures[version] = result.capture
    loc = locate(captures["4.40.2"], captures["4.46.3"])
    assert loc.kind == "forward" and loc.probe, loc.sentences()
    assert re.fullmatch(r"transformer\.h\.\d+\.attn", loc.module), loc.sentences()
    found = loc.operation
    assert found is not None and found.kind == "parted", loc.sentences()
    assert any("scaled_dot_product" in name for name in found.candidate_ops), found
    assert not any("scaled_dot_product" in name for name in found.baseline_ops), found
    assert found.baseline_ops and found.baseline_ops[0].startswith("aten."), found
    assert loc.sentences()[1].startswith("its operations differ from "), loc.sentences()


def test_an_operation_is_evidence_only_on_equal_inputs_a_faithful_replay_and_whole_records():
    """On a call whose inputs differ every operation differs (none is named); a replay that did
    not reproduce the call's output is no evidence; a side whose budget ran out cannot say the
    rest is equal nor that the other computes what it never recorded; a changed dtype is
    named as such."""
    same = ops(*LINEAR, op("aten.addmm.default", [1.0, 2.0]))
    moved = ops(*LINEAR, op("aten.addmm.default", [1.0, 2.0 + 3 * ULP2]))
    assert operation(same, moved).kind == "output"
    unfaithful = operation(same, moved, reproduced=False)
    assert unfaithful.kind == "unavailable" and "no evidence" in unfaithful.sentence()
    cut = ops(*LINEAR, truncated=True)  # the candidate stopped before its addmm
    for found in (operation(same, cut), operation(cut, ops(*LINEAR, truncated=True))):
        assert found.kind == "unavailable" and "budget was spent" in found.sentence()
        assert "inside it" not in found.sentence()
    as_double = op("aten.addmm.default", [1.0, 2.0])
    as_double["out"].update(dtype="float64", digest=hashlib.sha256(b"as float64").hexdigest())
    changed = operation(same, ops(*LINEAR, as_double))
    assert "in its dtype (float32 → float64)" in changed.sentence(), changed.sentence()
    # a float8 output is not measured as float32: its values differ, no ULPs
    eight = [ops(*LINEAR, op("aten.addmm.default", values)) for values in ([1.0], [2.0])]
    for side in eight:
        side.ops[-1].out.dtype = "float8_e4m3fn"
    assert "in float8_e4m3fn values (no ULPs)" in operation(*eight).sentence()
    # located on inputs that differ (the walk out stopped at a root): no operation attached
    old = with_operations(capture_for("2.13.0", 3), 0)
    new = with_operations(capture_for("2.14.1", 3), 5)
    for call in new["calls"]:
        call["inputs"] = hashlib.sha256(b"other inputs").hexdigest()
    loc = locate(Capture.model_validate(old), Capture.model_validate(new))
    assert loc.same_inputs is False and loc.operation is None, loc.sentences()
