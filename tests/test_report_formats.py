"""Every report format, parsed back: JSON (schema), JUnit XML, GitHub annotations, Markdown
(headline, marker, size cap), text (width, colour). Reports are built from real verdicts of
compare_runs on hand-made RunResults and real lock diffs, as the flows build them; nothing
runs a framework, so these are fast.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import TORCH_LOCK, make_project, run_cli
from forked_cli import cli_env
from lockguard.names import FORMATS
from lockguard.flows.report_parts import lock_info
from lockguard.compare.tolerance import Policy
from lockguard.compare.verdicts import compare_runs, is_failure, skipped
from lockguard.names import Verdict
from lockguard.locks.diff import diff_locks
from lockguard.locks.parser import parse_lock_text
from lockguard.progress import Progress, show_command
from lockguard.report import (
    SCHEMA_VERSION, GitBase, Report, ReportError, RuleFailure, load_report, render,
)
from lockguard.report.markdown import LIMIT, MARKER
from lockguard.results import SCHEMA_VERSION as RESULT_SCHEMA, RunResult
from lockguard.locks.ref import LockRef

HASH = {name: f"--hash=sha256:{name * 64}" for name in "abcdef"}
OLD_LOCK = f"""\
# a lock as pip-compile writes it
numpy==1.26.4 \\
    {HASH['a']}
six==1.16.0 \\
    {HASH['c']}
"""
NEW_LOCK = f"""\
--extra-index-url https://mirror.example/simple

numpy==2.0.2 \\
    {HASH['b']}
six==1.16.0 \\
    {HASH['c']}
"""
BASELINE_PATH = "origin/main:requirements.txt"  # a lock read from git: LockRef.path is its ref


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of `text` that starts with `needle`, found by hand."""
    return next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(needle))


def run(sid: str, losses: list[float], framework: str = "numpy") -> RunResult:
    return RunResult.model_validate({
        "schema_version": RESULT_SCHEMA, "scenario": sid, "framework": framework,
        "device": "cpu", "losses": losses, "steps": len(losses),
        "param_digest": f"sha256:{losses[-1]!r}"})


def verdict(sid: str, old: list[float], new: list[float], policy: Policy,
            framework: str = "numpy"):
    return compare_runs([run(sid, old, framework)], [run(sid, new, framework)], policy=policy,
                        baseline_kind="lock", expected_device="cpu", timed_together=False)


def ab_report(verdicts, policy: Policy, command: str = "check") -> Report:
    """A report as check --base builds it: baseline from git, candidate on disk."""
    old = parse_lock_text(OLD_LOCK, BASELINE_PATH)
    new = parse_lock_text(NEW_LOCK, "requirements.txt")
    failing = [v.scenario for v in verdicts if is_failure(v, policy)]
    return Report(
        command=command, mode="ab", device="cpu",
        base=GitBase(ref="origin/main", merge_base="1a2b3c4d" * 5),
        locks=[lock_info(LockRef(Path(BASELINE_PATH), old,
                                 label="main@1a2b3c4:requirements.txt"), "baseline"),
               lock_info(LockRef(Path("requirements.txt"), new), "candidate")],
        lock_diffs=[diff_locks(old, new)], verdicts=verdicts, failing=failing,
        passed=not failing, duration_s=12.5,
        invocation=["lockguard", "check", "--base", "origin/main"])


EXACT = Policy(exact=True)


@pytest.fixture
def drift_report() -> Report:
    """One drift (fails), one identical, one within tolerance (passes, worth a look) and
    four scenarios skipped for frameworks the lock does not pin."""
    verdicts = [
        verdict("loss_ema", [1.0, 0.5, 0.25], [1.0, 0.5000001, 0.2500001], EXACT),
        verdict("numpy.mlp", [1.0, 0.5], [1.0, 0.5], EXACT),
        verdict("numpy.moved", [1.0, 0.5], [1.0, 0.50000001], Policy()),
    ]
    verdicts += [skipped(f"jax.s{i}", "jax", "no lock pins jax (locks pin: numpy)")
                 for i in range(3)]
    verdicts.append(skipped("tf.mlp", "tensorflow", "no lock pins tensorflow (locks pin: numpy)"))
    report = ab_report(verdicts, EXACT)
    report.failing = ["loss_ema"]  # the moved one runs under the default policy: it passes
    assert [v.verdict for v in verdicts[:3]] == [Verdict.drift, Verdict.identical,
                                                 Verdict.within_tolerance]
    return report


def rule_report() -> Report:
    lock = parse_lock_text(NEW_LOCK, "requirements.txt")
    return Report(command="check", mode="golden",
                  locks=[lock_info(LockRef(Path("requirements.txt"), lock), "candidate")],
                  rule_failures=[RuleFailure(lock="requirements.txt",
                                             rule="torchvision-matches-torch",
                                             message="torchvision 0.20.0 belongs to torch 2.5, "
                                                     "not 2.13.0+cpu", lines=[3, 5])],
                  passed=False)


# ------------------------------------------------------------------------------------ json

def test_json_is_versioned_and_round_trips(drift_report, tmp_path):
    document = json.loads(render(drift_report, "json"))
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["lockguard_version"]
    assert document["base"] == {"ref": "origin/main", "merge_base": "1a2b3c4d" * 5}
    assert document["failing"] == ["loss_ema"]
    [baseline, candidate] = document["locks"]
    assert baseline["label"] == "main@1a2b3c4:requirements.txt"
    [option] = document["lock_diffs"][0]["option_changes"]
    assert option["added_lines"] == [line_of(NEW_LOCK, "--extra-index-url")]
    path = tmp_path / "r.json"
    path.write_text(render(drift_report, "json"))
    again = load_report(path)
    assert again == drift_report
    for fmt in FORMATS:  # the re-read report renders exactly as the original
        assert render(again, fmt) == render(drift_report, fmt)


def heavier_report(fail_on: frozenset[Verdict]) -> Report:
    """One A/B scenario whose training peaked at 3x the baseline's host memory and 1.5x its
    device memory, numbers unchanged, under a policy failing on `fail_on`."""
    def peaked(host: int, device: int) -> RunResult:
        return run("numpy.mlp", [1.0, 0.5]).model_copy(
            update={"peak_memory_bytes": host << 20, "peak_device_memory_bytes": device << 20})

    policy = Policy(fail_on=fail_on)
    v = compare_runs([peaked(100, 1000)], [peaked(300, 1500)], policy=policy,
                     baseline_kind="lock", expected_device="cpu", timed_together=True)
    assert v.verdict == Verdict.heavier
    return ab_report([v], policy)


@pytest.mark.parametrize("gated", [False, True])
def test_heavier_in_every_format(tmp_path, gated):
    fail_on = frozenset({Verdict.drift, Verdict.heavier} if gated else {Verdict.drift})
    report = heavier_report(fail_on)
    assert report.passed is not gated
    path = tmp_path / "r.json"
    path.write_text(render(report, "json"))
    again = load_report(path)
    assert (again.verdicts[0].memory_ratio, again.verdicts[0].device_memory_ratio) == (3.0, 1.5)
    rendered = {fmt: render(again, fmt) for fmt in FORMATS}
    reason = "the training's peak host memory is 300.0 MiB against the baseline's 100.0 MiB"
    assert "heavier" in rendered["text"] and "300.0 MiB" in rendered["text"]
    md = rendered["markdown"]
    assert ("1 of 1 scenario got heavier in memory" in md.splitlines()[0]) is gated
    assert "Peak memory of the training (candidate / baseline, same machine): host ×3.00," \
        " device ×1.50" in md
    assert "<summary>numpy.mlp: heavier</summary>" in md
    assert "peak memory (training)</td><td>×3.00" in rendered["html"].replace("\n", "")
    root = ET.fromstring(rendered["junit"])
    [case] = root.iter("testcase")
    failure = case.find("failure")
    assert (failure is not None) is gated
    if gated:
        assert failure.get("type") == "heavier" and reason in failure.text
    [scenario] = [a for a in annotations(rendered["github"]) if "numpy.mlp" in a["title"]]
    assert scenario["level"] == ("error" if gated else "warning")
    assert reason in scenario["message"]


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "invalid JSON"),
    ('{"a": 1}', "not a lockguard JSON report"),
    ('{"command": "check", "verdicts": []}', "schema_version None"),
    ('{"command": "check", "verdicts": [], "schema_version": 99}', "schema_version 99"),
    ('{"command": "nope", "mode": "ab", "verdicts": [], "schema_version": 1}',
     "invalid report at command"),
])
def test_a_bad_report_file_is_one_line(tmp_path, content, fragment):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(ReportError) as info:
        load_report(path)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_report_command_rerenders_and_exits_with_the_gate(drift_report, tmp_path):
    failed = tmp_path / "failed.json"
    failed.write_text(render(drift_report, "json"))
    passed = tmp_path / "passed.json"
    passed.write_text(render(drift_report.model_copy(update={"failing": [], "passed": True}),
                             "json"))
    proc = run_cli("report", str(failed), "--format", "junit", "--report",
                   f"markdown={tmp_path / 'r.md'}", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert ET.fromstring(proc.stdout).tag == "testsuites"
    assert (tmp_path / "r.md").read_text() == render(drift_report, "markdown")
    ok = run_cli("report", str(passed), "--format", "github", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    proc = run_cli("report", str(bad), "--report", f"junit={tmp_path / 'x.xml'}", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "bad.json" in proc.stderr
    assert not (tmp_path / "x.xml").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--report", "yaml=r.yaml"], "unknown format 'yaml'"),
    (["--report", "junit"], "expected FORMAT=PATH"),
    (["--report", "junit=a-file/r.xml"], "not a directory"),
    (["-o", "r.xml", "--report", "junit=r.xml"], "already written by -o"),
    (["--report", "json=r.json", "--report", "junit=./r.json"], "already written by"),
])
def test_report_targets_are_checked_before_anything_runs(tmp_path, args, fragment):
    (tmp_path / "a-file").write_text("")
    # No config here at all: the report options are refused before the config is read.
    proc = run_cli("check", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert fragment in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


# ----------------------------------------------------------------------------------- junit

def test_junit_has_a_testcase_per_scenario_with_the_evidence(drift_report):
    root = ET.fromstring(render(drift_report, "junit"))
    [suite] = root.findall("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {v.scenario for v in drift_report.verdicts}
    assert {c.get("classname") for c in cases.values()} == {"numpy", "jax", "tensorflow"}
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("7", "1", "4")
    [failure] = cases["loss_ema"].findall("failure")
    assert failure.get("type") == "drift"
    assert failure.get("message").startswith("drift: from step 1")
    assert "losses beyond tolerance from step 1" in failure.text
    assert f"requirements.txt:{line_of(NEW_LOCK, 'numpy==')} numpy 1.26.4 → 2.0.2" \
        in failure.text
    assert cases["numpy.moved"].find("failure") is None  # passes the gate, still reported
    assert "within_tolerance" in cases["numpy.moved"].find("system-out").text
    assert cases["jax.s0"].find("skipped").get("message").startswith("no lock pins jax")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    new_hash = drift_report.locks[1].lock_hash
    assert props["lock.candidate.requirements.txt.hash"] == new_hash
    assert props["lock.baseline.main@1a2b3c4:requirements.txt.numpy"] == "1.26.4"
    case_props = {p.get("name"): p.get("value")
                  for p in cases["loss_ema"].find("properties")}
    assert case_props["candidate.lock_hash"] == new_hash
    assert (case_props["baseline.numpy"], case_props["candidate.numpy"]) == ("1.26.4", "2.0.2")


def test_junit_fails_a_rule_break_and_a_gate_that_compared_nothing():
    root = ET.fromstring(render(rule_report(), "junit"))
    [case] = root.iter("testcase")
    assert case.get("classname") == "lock" and "torchvision-matches-torch" in case.get("name")
    assert "torchvision 0.20.0" in case.find("failure").get("message")
    idle = Report(command="check", mode="golden", passed=False,
                  verdicts=[skipped("torch.mlp", "torch", "no lock pins torch")],
                  notes=["nothing was compared: all 1 selected scenarios were skipped"])
    root = ET.fromstring(render(idle, "junit"))
    assert root.get("failures") == "1"
    gate = next(c for c in root.iter("testcase") if c.get("name") == "gate")
    assert "nothing was compared" in gate.find("failure").get("message")


# ---------------------------------------------------------------------------------- github

ANNOTATION = re.compile(r"^::(?P<level>error|warning|notice)(?: (?P<props>[^:]*))?::(?P<msg>.*)$")


def annotations(text: str) -> list[dict[str, str]]:
    found = []
    for line in text.splitlines():
        match = ANNOTATION.match(line)
        assert match, line
        props = dict(p.split("=", 1) for p in (match["props"] or "").split(",") if p)
        found.append({"level": match["level"], **props,
                      "message": match["msg"].replace("%0A", "\n").replace("%0D", "\r")
                      .replace("%25", "%")})
    return found


def test_github_annotates_the_changed_lock_lines(drift_report):
    found = annotations(render(drift_report, "github"))
    errors = [a for a in found if a["level"] == "error"]
    assert [(a["file"], a["line"]) for a in errors] == [
        ("requirements.txt", str(line_of(NEW_LOCK, "numpy==")))]
    assert errors[0]["title"].startswith("lockguard%3A loss_ema drift%3A from step 1")
    assert "losses beyond tolerance" in errors[0]["message"]
    warnings = {a["title"]: a for a in found if a["level"] == "warning"}
    moved = next(a for t, a in warnings.items() if "numpy.moved" in t)
    assert moved["line"] == str(line_of(NEW_LOCK, "numpy=="))
    option = warnings["lockguard%3A installer option changed"]
    assert option["line"] == str(line_of(NEW_LOCK, "--extra-index-url"))
    assert "+ --extra-index-url https://mirror.example/simple" in option["message"]
    assert not any("numpy.mlp" in a["title"] for a in found)  # identical: nothing to say


def test_github_puts_family_rule_failures_at_their_lines():
    found = annotations(render(rule_report(), "github"))
    assert [(a["level"], a["file"], a["line"]) for a in found] == [
        ("error", "requirements.txt", "3"), ("error", "requirements.txt", "5")]


def test_github_blames_every_changed_line_when_no_family_line_changed():
    """A torch scenario drifts, but only numpy and an index changed: either can be the cause."""
    v = verdict("torch.mlp", [1.0, 0.5], [1.0, 0.6], EXACT, framework="torch")
    report = ab_report([v], EXACT)
    for lock in report.locks:
        lock.frameworks = sorted({*lock.frameworks, "torch"})
    lines = sorted(int(a["line"]) for a in annotations(render(report, "github"))
                   if a["level"] == "error")
    assert lines == sorted([line_of(NEW_LOCK, "numpy=="), line_of(NEW_LOCK, "--extra")])


def test_a_library_scenario_is_blamed_on_its_own_lock_and_its_library():
    """Two candidate locks pin torch; transformers.gpt2 ran from the second (the one that pins
    transformers too, as its evidence says), where torch and transformers both moved: its
    annotations and JUnit name that lock, and the transformers line with torch's."""
    from lockguard.report import Evidence, Side

    def lock(text: str, path: str):
        return parse_lock_text(text, path)

    plain_old, plain_new = (lock(f"torch=={v} \\\n    {HASH['a']}\n", "torch.txt")
                            for v in ("2.13.0", "2.13.0"))
    lib_text_old = f"torch==2.13.0 \\\n    {HASH['a']}\ntransformers==5.14.1 \\\n    {HASH['c']}\n"
    lib_text_new = f"torch==2.14.1 \\\n    {HASH['b']}\ntransformers==5.15.0 \\\n    {HASH['d']}\n"
    lib_old, lib_new = lock(lib_text_old, "old/lib.txt"), lock(lib_text_new, "lib.txt")
    v = verdict("transformers.gpt2", [1.0, 0.5], [1.0, 0.6], EXACT, framework="torch")
    report = Report(
        command="check", mode="ab", device="cpu",
        locks=[lock_info(LockRef(Path("old/torch.txt"), plain_old), "baseline"),
               lock_info(LockRef(Path("old/lib.txt"), lib_old), "baseline"),
               lock_info(LockRef(Path("torch.txt"), plain_new), "candidate"),
               lock_info(LockRef(Path("lib.txt"), lib_new), "candidate")],
        lock_diffs=[diff_locks(plain_old, plain_new), diff_locks(lib_old, lib_new)],
        verdicts=[v], failing=[v.scenario], passed=False,
        evidence=[Evidence(scenario=v.scenario,
                           baseline=Side(role="baseline", kind="lock", name="old/lib.txt",
                                         result=run(v.scenario, [1.0, 0.5], "torch")),
                           candidate=Side(role="candidate", kind="lock", name="lib.txt",
                                          result=run(v.scenario, [1.0, 0.6], "torch")))])
    assert report.lock_of(v).path == "lib.txt"
    assert report.lock_of(v, "baseline").path == "old/lib.txt"
    errors = [a for a in annotations(render(report, "github")) if a["level"] == "error"]
    assert sorted((a["file"], int(a["line"])) for a in errors) == [
        ("lib.txt", line_of(lib_text_new, "torch==")),
        ("lib.txt", line_of(lib_text_new, "transformers=="))]
    case = ET.fromstring(render(report, "junit")).find(".//testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (props["baseline.lock"], props["candidate.lock"]) == ("old/lib.txt", "lib.txt")
    assert props["candidate.torch"] == "2.14.1"


def test_github_escapes_what_would_end_a_command():
    v = verdict("loss_ema", [1.0], [2.0], EXACT)
    v.reasons = ["100% off, line one:\nline two"]
    text = render(ab_report([v], EXACT), "github")
    assert text.count("\n") == text.count("::error") + text.count("::warning")
    assert "100%25 off, line one:%0Aline two" in text


# -------------------------------------------------------------------------------- markdown

def test_markdown_headline_first_then_phone_sized_parts(drift_report):
    md = render(drift_report, "markdown")
    lines = md.splitlines()
    assert lines[0] == "❌ lockguard: 1 of 3 scenarios drifted (numpy 1.26.4 → 2.0.2)"
    assert MARKER in lines
    assert lines.index(MARKER) > 0  # hidden, at the end
    body = md.split("<details>")[0]
    # The failing scenario is a bullet, first; no wide table outside the folded details.
    bullets = [ln for ln in body.splitlines() if ln.startswith("- ")]
    assert "loss\\_ema" in bullets[0] and "from step 1" in bullets[0]
    assert not any(ln.startswith("|") for ln in body.splitlines())
    assert "**Tally:** 1 drift · 1 within_tolerance · 1 identical" in body
    assert "4 skipped: no lock pins jax, tensorflow" in body
    assert "`main@1a2b3c4:requirements.txt`" in body
    assert BASELINE_PATH not in md  # the label, with the merge base, names it
    assert "- added --extra-index-url https://mirror.example/simple (line 1)" in body
    assert "lockguard check --base origin/main --scenario loss_ema" in body
    # An intended change passes only through an acceptance committed with it: A/B (the PR
    # gate) and golden checks alike name the command that makes one.
    assert 'lockguard accept --scenario loss_ema --reason "' in body
    golden_md = render(drift_report.model_copy(update={"mode": "golden"}), "markdown")
    assert 'lockguard accept --scenario loss_ema --reason "' in golden_md.split("<details>")[0]
    assert "<summary>loss\\_ema: drift</summary>" in md


def test_markdown_passing_and_rule_headlines():
    v = verdict("numpy.mlp", [1.0, 0.5], [1.0, 0.5], EXACT)
    assert render(ab_report([v], EXACT), "markdown").splitlines()[0] == (
        "✅ lockguard: 1 scenario passed with numpy 1.26.4 → 2.0.2 and "
        "+ --extra-index-url https://mirror.example/simple (1 identical)")
    assert render(rule_report(), "markdown").splitlines()[0] == (
        "❌ lockguard: requirements.txt breaks the torchvision-matches-torch rule")


def test_markdown_neutralises_markup_in_reasons():
    v = verdict("loss_ema", [1.0], [2.0], EXACT)
    v.reasons = ["<img src=x onerror=alert(1)> | `code` *bold* [link](http://x)"]
    md = render(ab_report([v], EXACT), "markdown")
    assert not re.search(r"(?<!\\)<img", md)  # backslash-escaped: shown, never HTML
    assert "\\<img src=x onerror=alert(1)\\> \\| \\`code\\` \\*bold\\* \\[link\\](http://x)" in md


def test_markdown_is_capped_below_githubs_comment_limit():
    reason = "losses beyond tolerance " + "with a long explanation " * 30
    verdicts = []
    for i in range(300):
        v = verdict(f"scenario_{i:03d}", [1.0, 0.5], [1.0, 0.6], EXACT)
        v.reasons = [reason, reason]
        verdicts.append(v)
    report = ab_report(verdicts, EXACT)
    md = render(report, "markdown")
    assert len(md.encode("utf-8")) <= LIMIT < 65_536
    lines = md.splitlines()
    assert lines[0].startswith("❌ lockguard: 300 of 300 scenarios drifted")
    assert MARKER in lines
    assert any("folded sections were cut" in ln for ln in lines)
    # Details go first: every failing scenario still has its bullet.
    assert sum(ln.startswith("- ❌ **scenario\\_") for ln in lines) == 300
    assert sum("<details>" in ln for ln in lines) > 10  # and as many details as fit
    assert "lockguard check --base origin/main\n" in md  # all of them, not 300 --scenario

    many = ab_report([verdict(f"s{i:05d}_" + "x" * 80, [1.0], [2.0], EXACT)
                      for i in range(1000)], EXACT)
    md = render(many, "markdown")
    assert len(md.encode("utf-8")) <= LIMIT and MARKER in md
    assert "more failing scenarios" in md

    huge_note = ab_report([], EXACT)
    huge_note.notes = ["x" * 100_000]
    md = render(huge_note, "markdown")
    assert len(md.encode("utf-8")) <= LIMIT and md.rstrip().endswith(MARKER)


# ------------------------------------------------------------------------------------ text

def test_text_fits_80_columns_and_shows_option_changes(drift_report):
    text = render(drift_report, "text", width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "+ --extra-index-url https://mirror.example/simple (line 1)" in text
    assert "lock changes: 2" in text
    assert "baseline lock main@1a2b3c4:requirements.txt" in text
    assert "4 skipped: no lock pins jax, tensorflow" in text
    assert "jax.s0" not in text  # collapsed
    assert "\x1b" not in text


def test_options_alone_are_not_no_lock_changes():
    old = parse_lock_text("six==1.16.0\n", "old.txt")
    new = parse_lock_text("--extra-index-url https://x.example/simple\nsix==1.16.0\n", "new.txt")
    report = Report(command="diff", mode="diff", lock_diffs=[diff_locks(old, new)])
    text = render(report, "text")
    assert "lock changes: 1" in text and "+ --extra-index-url https://x.example/simple" in text
    assert "- added --extra-index-url https://x.example/simple (line 1)" in render(
        report, "markdown")


def tty_run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """The CLI with stdout on a pseudo-terminal, as a user at a terminal sees it."""
    master, slave = pty.openpty()
    full = cli_env(env)
    proc = subprocess.Popen([sys.executable, "-m", "lockguard", *args], cwd=cwd, env=full,
                            stdout=slave, stderr=subprocess.PIPE, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_no_color_is_honoured_on_a_terminal_and_the_width_followed(drift_report, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(render(drift_report, "json"))
    colored = tty_run(["report", str(path)], tmp_path, {"COLUMNS": "80"})
    assert "\x1b[" in colored
    plain = tty_run(["report", str(path)], tmp_path, {"COLUMNS": "80", "NO_COLOR": "1"})
    assert "\x1b" not in plain and "loss_ema" in plain
    assert max(len(line) for line in plain.replace("\r", "").splitlines()) <= 80


# ------------------------------------------------------------------------- GitHub Actions

def test_under_github_actions_the_summary_annotations_and_table_appear(tmp_path):
    """A lock that breaks a family rule fails in a second: enough to see what a workflow
    step shows without being asked, with JSON on stdout kept clean."""
    lock = TORCH_LOCK.read_text() + (
        "torchvision==0.20.0 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    project = make_project(tmp_path / "p", 'lock = "requirements.txt"',
                           files={"requirements.txt": lock})
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step")  # appended to, not replaced
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary),
           "LOCKGUARD_CACHE": str(tmp_path / "cache")}
    proc = run_cli("check", "--scenario", "torch.mlp", "--format", "json", cwd=project, env=env)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["rule_failures"][0]["rule"] == "torchvision-matches-torch"
    vision = line_of(lock, "torchvision==")
    assert f"::error file=requirements.txt,line={vision}," in proc.stderr
    assert "FAIL check" in proc.stderr  # the verdict table, in the log
    text = summary.read_text()
    assert text.startswith("earlier step\n❌ lockguard: requirements.txt breaks the "
                           "torchvision-matches-torch rule")
    assert MARKER in text

    # Text on stdout: the table and the annotations both go there.
    proc = run_cli("check", "--scenario", "torch.mlp", cwd=project, env=env)
    assert proc.returncode == 1
    assert f"::error file=requirements.txt,line={vision}," in proc.stdout
    assert "FAIL check" in proc.stdout
    assert summary.read_text().count(MARKER) == 2

    # Markdown on stdout (redirected into a file, say) stays Markdown; the extras go to stderr.
    proc = run_cli("check", "--scenario", "torch.mlp", "--format", "markdown", cwd=project,
                   env=env)
    assert proc.stdout.startswith("❌ lockguard: requirements.txt breaks")
    assert "::error" not in proc.stdout and "FAIL check" not in proc.stdout
    assert "::error" in proc.stderr and "FAIL check" in proc.stderr


# -------------------------------------------------------------------------------- progress

def test_progress_counts_times_and_shows_commands(capsys, monkeypatch):
    monkeypatch.setattr("lockguard.progress._watcher", None)
    show_command(["not", "verbose"])  # nobody asked for -v: nothing shown
    progress = Progress(verbose=True)
    with progress.counting(2, 3, "environment"):
        with progress.step("Building venv for x.txt"):
            show_command(["pip", "install", "-r", "a lock.txt"])
    with progress.step("Running 2 training run(s)", total=2) as step:
        assert step.advance() == 1
        assert step.advance() == 2
    err = capsys.readouterr().err
    assert "environment 2 of 3: Building venv for x.txt …" in err
    assert "$ pip install -r 'a lock.txt'" in err
    assert re.search(r"environment 2 of 3: Building venv for x.txt: done in \d+\.\d s", err)
    assert re.search(r"Running 2 training run\(s\): done in \d+\.\d s\n", err)
    assert "not verbose" not in err


def test_every_format_says_which_step_times_judge_nothing_and_why():
    """A step-time ratio from runs made side by side judges nothing: marked, and said once
    under the table; a scenario too short to time says so with the reason, in text, Markdown
    and HTML alike."""
    from lockguard.compare.timing import TimingCheck
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.names import Verdict
    from lockguard.report import Report, render

    short = TimingCheck(measure="step median", runs=5, baseline_s=1e-4, candidate_s=1.2e-4,
                        verdict="not judged",
                        reason="steps of 0.1 ms are too short to time (under 2 ms)")
    report = Report(command="check", mode="ab", passed=True, verdicts=[
        ScenarioVerdict(scenario="torch.mlp", framework="torch", verdict=Verdict.identical,
                        step_time_ratio=0.18, timing=short),
        ScenarioVerdict(scenario="numpy.mlp", framework="numpy", verdict=Verdict.identical,
                        step_time_ratio=1.9)])
    for fmt in ("text", "markdown", "html"):
        out = " ".join(render(report, fmt).split())
        assert ("timing not judged for torch.mlp: steps of 0.1 ms are too short to time "
                "(under 2 ms)") in out, fmt
        if fmt != "markdown":  # which shows no step times
            assert "×0.18*" in out and "×1.90*" in out, fmt
            assert "from runs that judge nothing" in out, fmt


def test_a_headline_names_the_framework_first_and_counts_the_cuda_wheels():
    """A torch bump moves a dozen CUDA runtime wheels with it: the headline names torch, then
    the count of the CUDA wheels, never "cuda-toolkit …, nvidia-cublas … and 14 more"."""
    from lockguard.locks.diff import diff_locks
    from lockguard.locks.parser import parse_lock_text
    from lockguard.report.markdown import headline

    cuda = ["cuda-toolkit", "nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13"]
    old = parse_lock_text("".join(f"{n}==1.0\n" for n in cuda) + "torch==2.9.1\nsix==1.0\n",
                          "old.txt")
    new = parse_lock_text("".join(f"{n}==1.1\n" for n in cuda) + "torch==2.10.0\nsix==1.1\n",
                          "new.txt")
    v = verdict("torch.mlp", [1.0, 0.5], [1.0, 0.5], EXACT)
    report = ab_report([v], EXACT).model_copy(update={"lock_diffs": [diff_locks(old, new)]})
    line = headline(report)
    assert "torch 2.9.1 → 2.10.0, six 1.0 → 1.1 and 4 CUDA runtime wheels" in line, line
    body = render(report, "markdown")
    assert "- 4 CUDA runtime wheels: cuda-toolkit 1.0 → 1.1 (upgraded" in body
    assert "\n- - " not in body and "\n- + " not in body


def test_junit_testcases_carry_the_seconds_their_runs_trained(tmp_path):
    from fakes import FakeBackend, lock
    from lockguard.config import Config
    from lockguard.flows.ab import check_ab
    from lockguard.scenarios import bundled
    from lockguard.settings import Settings

    numpy = [s for s in bundled() if s.id == "numpy.mlp"]
    report = check_ab(Settings.resolve(Config(root=tmp_path, steps=4)),
                      [lock(tmp_path, "new.txt", "numpy==2.0.2\n")],
                      [lock(tmp_path, "old.txt", "numpy==1.26.4\n")], numpy,
                      backend=FakeBackend())
    [case] = ET.fromstring(render(report, "junit")).iter("testcase")
    assert case.get("time") == "0.020"  # the fake's 0.01 s a run, both sides


def test_what_a_pr_changes_of_the_gate_is_said_first_in_every_format():
    """check --base: the sentence that the PR changes the gate, and each change, in every
    format (the text one was the only one tested)."""
    import json as _json

    from lockguard.report import GatePolicy, Report, render

    report = Report(command="check", mode="ab", passed=True, gate=GatePolicy(
        source="base", judged_by="main@1a2b3c4:pyproject.toml",
        changes=["fail_on: drift, broken → broken", "tolerance: (default) → exact"]))
    headline = "this PR changes the gate: judged by main@1a2b3c4:pyproject.toml"
    for fmt in ("text", "markdown", "html", "github", "junit"):
        # (as each format escapes: markdown's \_, a workflow command's %XX)
        shown = " ".join(render(report, fmt).split()).replace("\\_", "_")
        shown = shown.replace("%3A", ":").replace("%2C", ",").replace("%0A", " ")
        assert headline in shown or fmt == "junit", fmt  # JUnit: the changes, as properties
        assert "fail_on: drift, broken → broken" in shown, fmt
        assert "tolerance: (default) → exact" in shown, fmt
    document = _json.loads(render(report, "json"))
    assert document["gate"]["changes"] == ["fail_on: drift, broken → broken",
                                           "tolerance: (default) → exact"]
