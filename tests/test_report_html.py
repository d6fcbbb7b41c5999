"""The HTML report: parsed back (structure, escaping, the policy that forbids every fetch, the
curves and where their marks sit), and opened in a real headless Chromium at phone size (it
renders, the curves are drawn, nothing is requested but the file, no console error). Reports
come from real verdicts of compare_runs on RunResults, with the evidence the flows attach; one
test takes a real A/B check of the NumPy 2 promotion change through the CLI.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import pytest

from browser import visit
from conftest import DATA, LOSS_EMA, make_project, run_cli
from lockguard.flows.ab import diff as diff_report
from lockguard.flows.report_parts import evidence, lock_info
from lockguard.compare.tolerance import Policy
from lockguard.compare.verdicts import compare_runs, is_failure
from lockguard.names import Verdict
from lockguard.locks.diff import diff_locks
from lockguard.locks.parser import parse_lock_text
from lockguard.report import Report, load_report, render
from lockguard.report.html import CSP, NO_EVIDENCE
from lockguard.report.svg import BOTTOM, HEIGHT
from lockguard.results import SCHEMA_VERSION as RESULT_SCHEMA, RunResult
from lockguard.locks.ref import LockRef

HASH = {name: f"--hash=sha256:{name * 64}" for name in "abc"}
OLD_LOCK = f"numpy==1.26.4 \\\n    {HASH['a']}\n"
NEW_LOCK = (f"--extra-index-url https://mirror.example/simple\n\nnumpy==2.0.2 \\\n"
            f"    {HASH['b']}\n")
HOSTILE = 'RuntimeError: <script>alert("owned")</script> & <img src=https://evil.example/x>'
STEPS = 20
DIVERGES = 7  # the step from which the candidate's losses move by one ULP


def losses(moved_from: int | None = None) -> list[float]:
    values = [2.0 * math.exp(-0.1 * step) + 0.01 * math.sin(step) for step in range(STEPS)]
    if moved_from is None:
        return values
    return values[:moved_from] + [math.nextafter(v, math.inf) for v in values[moved_from:]]


def run(sid: str, values: list[float], version: str, **extra) -> RunResult:
    return RunResult.model_validate({
        "schema_version": RESULT_SCHEMA, "scenario": sid, "framework": "numpy",
        "framework_version": version, "device": "cpu", "device_name": "cpu", "dtype": "float64",
        "steps": STEPS, "losses": values, "outputs": values[-3:], "output_shape": [3],
        "param_digest": "sha256:" + f"{hash(tuple(values)) & (2**64 - 1):016x}" * 4,
        "fingerprint": {"python": "3.11.2", "numpy": version, "threads": {"omp": 1}},
        "timings": {"first_step_s": 0.01, "step_median_s": 0.004},
        "peak_memory_bytes": 40 << 20, **extra})


# (scenario, policy, baseline run, candidate run): each a verdict the gate knows
CASES = [
    ("numpy.ulp", Policy(exact=True), {}, {"losses": losses(DIVERGES)}),  # drift
    ("numpy.tol", Policy(), {}, {"losses": losses(DIVERGES)}),  # within_tolerance
    ("numpy.same", Policy(), {}, {}),  # identical
    ("numpy.compiled", Policy(), {"compile": {"graph_breaks": 0}},  # compile_fallback
     {"compile": {"graph_breaks": 1, "break_reasons": ["<b>data-dependent</b> branch"]}}),
    ("numpy.crash", Policy(), {},  # broken, quoting a hostile log
     {"status": "crashed", "losses": losses()[:3], "error": "Traceback ...\n" + HOSTILE}),
]


def ab_report() -> Report:
    """An A/B report as the flow builds it: verdicts, the failing set under each policy, both
    sides' runs as evidence, the locks and their diff (a package and an index changed)."""
    old = parse_lock_text(OLD_LOCK, "old.txt")
    new = parse_lock_text(NEW_LOCK, "new.txt")
    verdicts, proof, failing = [], [], []
    for sid, policy, base_extra, cand_extra in CASES:
        base = run(sid, losses(), "1.26.4", **base_extra)
        cand = run(sid, cand_extra.pop("losses", losses()), "2.0.2", **cand_extra)
        v = compare_runs([base], [cand], policy=policy, baseline_kind="lock",
                         expected_device="cpu", timed_together=True)
        verdicts.append(v)
        proof.append(evidence(sid, ("lock", "old.txt", base), ("lock", "new.txt", cand)))
        if is_failure(v, policy):
            failing.append(sid)
    assert [v.verdict for v in verdicts] == [
        Verdict.drift, Verdict.within_tolerance, Verdict.identical, Verdict.compile_fallback,
        Verdict.broken]
    return Report(command="check", mode="ab", device="cpu",
                  locks=[lock_info(LockRef(Path("old.txt"), old), "baseline"),
                         lock_info(LockRef(Path("new.txt"), new), "candidate")],
                  lock_diffs=[diff_locks(old, new)], verdicts=verdicts, evidence=proof,
                  failing=failing, passed=not failing, duration_s=3.5,
                  invocation=["lockguard", "check", "--baseline-lock", "old.txt"])


# ----------------------------------------------------------------------- the page, parsed

class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None]) -> None:
        self.tag, self.attrs, self.children, self.text = tag, attrs, [], ""

    def all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        found = []
        for child in self.children:
            classes = (child.attrs.get("class") or "").split()
            if (tag is None or child.tag == tag) and (cls is None or cls in classes):
                found.append(child)
            found += child.all(tag, cls)
        return found

    def content(self) -> str:
        return self.text + "".join(child.content() for child in self.children)


class Tree(HTMLParser):
    VOID = {"meta", "br", "img", "link", "hr", "input", "source", "wbr"}

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]
        self.feed(page)
        self.close()
        assert self.stack == [self.root], [n.tag for n in self.stack]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag):
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data):
        # Text after a child goes on a text node of its own, to keep the order readable.
        holder = Node("#text", {})
        holder.text = data
        self.stack[-1].children.append(holder)


def parse(page: str) -> Node:
    return Tree(page).root


def points(path: Node) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML]([\d.]+) ([\d.]+)", path.attrs["d"])]


def section(root: Node, scenario: str) -> Node:
    return next(s for s in root.all("section")
                if s.all("h2") and s.all("h2")[0].content().startswith(scenario + " "))


@pytest.fixture(scope="module")
def report() -> Report:
    return ab_report()


def test_lock_diff_first_then_verdicts_then_each_scenario(report):
    root = parse(render(report, "html"))
    ids = [s.attrs.get("id") for s in root.all("section")]
    assert ids == ["locks", "verdicts"] + [f"s{i}" for i in range(len(CASES))]
    locks = root.all("section")[0].content()
    assert "numpy 1.26.4 → 2.0.2 (upgraded, major)" in locks
    assert "+ --extra-index-url https://mirror.example/simple" in locks  # the index change too
    rows = root.all("section")[1].all("tr")[1:]
    assert len(rows) == len(CASES)
    # Failing first (the Report's order), each linking to its section.
    assert [r.all("a")[0].attrs["href"] for r in rows] == [f"#s{i}" for i in range(len(CASES))]
    first = [r.all("a")[0].content() for r in rows]
    assert set(first[:3]) == {"numpy.ulp", "numpy.compiled", "numpy.crash"} == set(
        report.failing)


def test_nothing_can_be_fetched_and_the_page_fits_a_phone(report):
    page = render(report, "html")
    root = parse(page)
    metas = root.all("meta")
    assert {"http-equiv": "Content-Security-Policy", "content": CSP} in [m.attrs for m in metas]
    assert CSP == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    assert any(m.attrs.get("name") == "viewport" and "width=device-width" in m.attrs["content"]
               for m in metas)
    assert not root.all("script") and not root.all("link") and not root.all("img")
    for node in root.all():
        for name, value in node.attrs.items():
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster"):
                assert not re.match(r"\s*(https?:)?//", value or ""), (node.tag, name, value)
    for svg in root.all("svg"):
        assert "viewBox" in {k.lower(): v for k, v in svg.attrs.items()} or svg.attrs.get(
            "viewbox")
        assert "width" not in svg.attrs and "height" not in svg.attrs  # scales to its box
    # Every table sits in a box that scrolls on its own, never the page.
    tables = root.all("table")
    assert tables and len(root.all("div", "scroll")) == len(tables)


def test_hostile_log_lines_stay_text(report):
    page = render(report, "html")
    root = parse(page)
    crash = section(root, "numpy.crash")
    reasons = crash.all("ul", "reasons")[0].content()
    assert HOSTILE in reasons  # shown, as text
    assert "&lt;script&gt;" in page and "<script" not in page
    assert not root.all("script") and not root.all("img") and not root.all("b")
    assert "<b>data-dependent</b> branch" in section(root, "numpy.compiled").content()


def test_each_scenario_has_both_curves_and_the_difference_on_a_log_scale(report):
    root = parse(render(report, "html"))
    for sid, *_ in CASES[:4]:
        svgs = section(root, sid).all("svg")
        assert len(svgs) == 2, sid
        overlay, delta = svgs
        curves = overlay.all("path", "curve")
        assert [c.attrs["class"] for c in curves] == ["curve baseline", "curve candidate"]
        assert all(len(points(c)) == STEPS for c in curves)
        [line] = delta.all("path", "delta")
        assert len(points(line)) == STEPS
    # The crashed candidate left 3 losses: both curves, no difference of unequal runs.
    crash = section(root, "numpy.crash")
    assert [len(points(c)) for c in crash.all("path", "curve")] == [STEPS, 3]
    assert "no difference curve" in crash.content()


def test_a_one_ulp_drift_shows_in_the_difference_plot_at_its_first_step(report):
    v = next(v for v in report.verdicts if v.scenario == "numpy.ulp")
    assert v.first_divergent_step == DIVERGES and v.losses.max_ulp == 1
    sec = section(parse(render(report, "html")), "numpy.ulp")
    overlay, delta = sec.all("svg")
    [line] = delta.all("path", "delta")
    xy = points(line)
    bottom = HEIGHT - BOTTOM
    assert all(y == bottom for _, y in xy[:DIVERGES])  # bitwise equal: on the bottom edge
    assert all(y < bottom for _, y in xy[DIVERGES:])  # a ULP apart: visibly above it
    for svg in (overlay, delta):
        [mark] = svg.all("line", "first")
        assert float(mark.attrs["x1"]) == xy[DIVERGES][0]  # at the first divergent step
    assert not delta.all("path", "band")  # exact: nothing is allowed
    assert "exact: any difference fails" in sec.content()


def test_the_tolerance_band_is_the_verdicts_tolerance(report):
    v = next(v for v in report.verdicts if v.scenario == "numpy.tol")
    assert v.tolerance is not None and not v.tolerance.exact
    sec = section(parse(render(report, "html")), "numpy.tol")
    delta = sec.all("svg")[1]
    [band] = delta.all("path", "band")
    [line] = delta.all("path", "delta")
    top = points(band)[1:-1]  # between the corners on the bottom edge
    assert len(top) == STEPS
    # Within tolerance: every difference lies inside the band (lower on the page = smaller).
    assert all(y_delta >= y_band for (_, y_delta), (_, y_band) in zip(points(line), top))
    assert f"atol {v.tolerance.atol:g}, rtol {v.tolerance.rtol:g}" in sec.content()
    assert sec.all("line", "first")


def test_digests_compile_diagnostics_machine_and_folded_fingerprints(report):
    root = parse(render(report, "html"))
    compiled = section(root, "numpy.compiled")
    text = compiled.content()
    assert "graph breaks" in text and "+ break" in text
    ulp = section(root, "numpy.ulp").content()
    assert "parameter digests differ" in ulp
    assert "×1.00" in ulp  # step time, timed together
    folded = section(root, "numpy.ulp").all("details")
    summaries = [d.all("summary")[0].content() for d in folded]
    assert "environment fingerprint: 1 difference" in summaries
    assert {"baseline fingerprint", "candidate fingerprint"} <= set(summaries)


def test_a_report_without_evidence_says_so(report, tmp_path):
    """A schema-1 report (no evidence, no tolerance) re-rendered by `lockguard report`."""
    data = json.loads(render(report, "json"))
    data["schema_version"] = 1
    del data["evidence"]
    for verdict in data["verdicts"]:
        del verdict["tolerance"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    proc = run_cli("report", str(old), "--format", "html", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the report's gate decision
    root = parse(proc.stdout)
    assert not root.all("svg")
    for sid, *_ in CASES:
        assert NO_EVIDENCE in section(root, sid).content()
    assert proc.stdout == render(load_report(old), "html")


def test_diff_record_and_golden_reports():
    old, new = parse_lock_text(OLD_LOCK, "old.txt"), parse_lock_text(NEW_LOCK, "new.txt")
    root = parse(render(diff_report(LockRef(Path("old.txt"), old),
                                    LockRef(Path("new.txt"), new)), "html"))
    assert [s.attrs["id"] for s in root.all("section")] == ["locks"]
    assert "lock diff" in root.all("h1")[0].content()

    cand = run("numpy.ulp", losses(), "2.0.2")
    v = compare_runs([], [cand], policy=Policy(), baseline_kind=None, expected_device="cpu",
                     timed_together=False)
    record = Report(command="record", mode="record", verdicts=[v],
                    evidence=[evidence("numpy.ulp", None, ("lock", "new.txt", cand))])
    sec = section(parse(render(record, "html")), "numpy.ulp")
    [svg] = sec.all("svg")  # one curve, nothing to take a difference from
    assert [c.attrs["class"] for c in svg.all("path", "curve")] == ["curve candidate"]

    base = run("numpy.ulp", losses(), "1.26.4")
    cand = run("numpy.ulp", losses(DIVERGES), "2.0.2")
    v = compare_runs([base], [cand], policy=Policy(exact=True), baseline_kind="golden",
                     expected_device="cpu", timed_together=False)
    golden = Report(command="check", mode="golden", verdicts=[v], failing=["numpy.ulp"],
                    passed=False, evidence=[evidence(
                        "numpy.ulp", ("golden", "golden/cpu/numpy.ulp.json (amd-x86)", base),
                        ("lock", "requirements.txt", cand))])
    text = section(parse(render(golden, "html")), "numpy.ulp").content()
    assert "baseline: golden golden/cpu/numpy.ulp.json (amd-x86)" in text
    assert "baseline (golden) solid" in text


# ------------------------------------------------------------------- in a real browser

def artefact_dir(tmp_path: Path) -> Path:
    where = Path(os.environ.get("LG_TEST_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


DRAWN = """(() => {
  const curves = [...document.querySelectorAll('svg path.curve')];
  return {
    href: location.href,
    curves: curves.length,
    drawn: curves.filter(p => p.getAttribute('d') && p.getBBox().width > 0).length,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    sideways: [...document.querySelectorAll('.scroll')]
      .filter(box => box.scrollWidth > box.clientWidth + 1).length,
    width: window.innerWidth,
  };
})()"""


def check_in_browser(page: Path, shot: Path) -> dict:
    """Open the page at phone size; it requests nothing but itself, logs no error, draws every
    curve and does not scroll sideways. The screenshot is kept as a test artefact."""
    seen = visit(page, DRAWN)
    shot.write_bytes(seen.screenshot)
    print(f"screenshot: {shot}")
    assert seen.requests == [page.resolve().as_uri()]
    assert seen.errors == []
    value = seen.value
    assert value["href"] == page.resolve().as_uri() and value["width"] == 390
    assert value["drawn"] == value["curves"] > 0
    assert value["overflow"] <= 0, "the page scrolls sideways on a phone"
    # Nor does any table in it: the locks, numerics and device tables stack on a phone.
    assert value["sideways"] == 0, "a table scrolls sideways on a phone"
    assert seen.screenshot[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", seen.screenshot[16:24])
    assert width >= 390 and height > 844  # the whole page, not one screen
    return value


def test_the_browser_sees_requests_and_errors(tmp_path):
    """The checks below can fail: a page that fetches and errs is caught doing both."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
                    '<script>console.error("boom"); throw new Error("bang")</script>'
                    "</body></html>")
    seen = visit(page, "document.images.length")
    assert seen.value == 1
    assert "http://127.0.0.1:9/x.png" in seen.requests
    text = "\n".join(seen.errors)
    assert "boom" in text and "bang" in text


def test_chromium_renders_it_draws_the_curves_and_fetches_nothing(report, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    value = check_in_browser(page, artefact_dir(tmp_path) / "report-ab-phone.png")
    static = [p for p in parse(page.read_text()).all("path", "curve") if p.attrs["d"]]
    assert value["curves"] == len(static) == 4 * 3 + 2  # 4 pairs and their Δ, the crash's pair


@pytest.mark.slow
def test_a_real_ab_check_writes_the_html_report(tmp_path):
    """The NumPy 2 promotion change (NEP 50) in A/B, exact: `--format html`, `--report html=`
    and `lockguard report --format html` give one page, which Chromium draws."""
    project = make_project(tmp_path / "p", """
        lock = "new.txt"
        scenarios = ["loss_ema"]
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"loss_ema.py": LOSS_EMA.read_text()},
        locks={"new.txt": DATA / "numpy-2.0.2.txt", "old.txt": DATA / "numpy-1.26.4.txt"})
    proc = run_cli("check", "--baseline-lock", "old.txt", "--format", "html", "--report",
                   "json=r.json", "--report", "html=r.html", cwd=project)
    assert proc.returncode == 1, proc.stderr
    page = (project / "r.html").read_text(encoding="utf-8")
    assert proc.stdout == page
    again = run_cli("report", "r.json", "--format", "html", cwd=project)
    assert again.returncode == 1 and again.stdout == page
    [v] = load_report(project / "r.json").verdicts
    assert v.verdict == Verdict.drift and v.first_divergent_step is not None
    sec = section(parse(page), "loss_ema")
    overlay, delta = sec.all("svg")
    [line] = delta.all("path", "delta")
    [mark] = delta.all("line", "first")
    assert float(mark.attrs["x1"]) == points(line)[v.first_divergent_step][0]
    assert "numpy 1.26.4 → 2.0.2" in parse(page).all("section")[0].content()
    value = check_in_browser(project / "r.html",
                             artefact_dir(tmp_path) / "report-nep50-phone.png")
    assert value["curves"] == 3


def test_a_noisy_baselines_envelope_is_drawn_around_the_curves(tmp_path):
    """A/B with --repeat over a nondeterministic baseline (the fake backend's noisy runs): the
    loss chart carries the envelope's low and high lines, as compare/envelope judged them."""
    from fakes import FakeBackend
    from lockguard.config import Config, Options
    from lockguard.settings import Settings
    from lockguard.flows.ab import check_ab
    from lockguard.locks.ref import read_lock
    from lockguard.scenarios import bundled

    locks = []
    for name, text in (("old.txt", "numpy==1.26.4\n"), ("new.txt", "numpy==2.0.2\n")):
        (tmp_path / name).write_text(text)
        locks.append(LockRef(tmp_path / name, read_lock(tmp_path / name)))
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "noisy",
                                  ("numpy.mlp", "2.0.2"): "noisy:-0.01"})
    made = check_ab(Settings.resolve(Config(root=tmp_path, steps=6), Options(repeat=3)),
                    [locks[1]], [locks[0]],
                    [s for s in bundled() if s.id == "numpy.mlp"],
                    backend=fake)
    [v] = made.verdicts
    assert v.envelope is not None and not v.envelope.inside
    root = parse(render(made, "html"))
    envelope = [p for p in section(root, "numpy.mlp").all("path")
                if "envelope" in p.attrs.get("class", "")]
    assert len(envelope) == 2 and all(len(points(p)) == 6 for p in envelope)
    low, high = (points(p) for p in envelope)
    assert all(yl >= yh for (_, yl), (_, yh) in zip(low, high))  # SVG y grows downwards
    assert "noise envelope of 3 baseline runs" in render(made, "html")


def test_terminal_escapes_in_compile_extras_and_hardware_names_reach_no_format():
    """Every string a report carries is stripped of terminal escapes before any format shows
    it: also the extra fields a harness adds to its compile diagnostics (rendered by the HTML
    compile table) and a hardware class's name (a CPU model string is the machine's to
    choose)."""
    from lockguard.hardware import HardwareClass
    from lockguard.names import FORMATS

    escape = "X\x1b]0;owned\x07\x1b[31mY"
    base = run("numpy.esc", losses(), "1.26.4", compile={"graph_breaks": 0, "note": escape})
    cand = run("numpy.esc", losses(), "2.0.2", compile={"graph_breaks": 0, "note": escape})
    v = compare_runs([base], [cand], policy=Policy(), baseline_kind="lock",
                     expected_device="cpu", timed_together=True)
    report = Report.model_construct(
        command="check", mode="ab", device="cpu", verdicts=[v],
        evidence=[evidence("numpy.esc", ("lock", "old.txt", base), ("lock", "new.txt", cand))],
        hardware={"cpu": HardwareClass("cpu", "x-1", f"CPU {escape}")}, passed=True)
    for fmt in FORMATS:
        out = render(report, fmt)
        assert "\x1b" not in out and "\x07" not in out, fmt
    assert "XY" in render(report, "html")  # the extra field is shown, cleaned
