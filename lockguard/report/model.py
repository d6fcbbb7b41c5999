"""The Report model: what every renderer draws, and what `--format json` writes and
`lockguard report` reads back (a versioned contract, `schema_version`).

A Report is built by the flows (lockguard/flows/) from pure comparison results. What a renderer
needs beyond the verdicts is a field here (which scenarios fail the gate: the policy is applied
by the flow, never by a renderer) or a method that reads the fields (the tally, the locks of a
framework), so that every format says the same; how it is worded is report/_common.py's.
"""


from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from lockguard import __version__
from lockguard.compare.verdicts import ScenarioVerdict
from lockguard.errors import LockguardError
from lockguard.files import MiB
from lockguard.names import PRECEDENCE, QUIET_VERDICTS, Verdict
from lockguard.locks.diff import LockDiff
from lockguard.hardware import HardwareClass
from lockguard.results import RunResult


# 1: the first versioned report (lock labels from git, the failing set, family-rule failures
#    with their lock lines, the invocation that reproduces it).
# 2: `evidence`: both sides' RunResults per scenario (per-step losses for curves, what `accept`
#    adopts) and the environment fingerprint difference. Version 1 files are read as version 2
#    without evidence.
# 3: `frameworks` (compare-frameworks: command "compare-frameworks", mode "frameworks", verdict
#    "measured"), a verdict's first_batch_differs, results' sample order and sync time. A
#    version 2 file is read as 3 (it holds none of these); a lockguard that reads only 2 says
#    the file is of a version it does not know, instead of failing on a field.
# 4: `gate` (check --base: whose configuration judged, and what the checkout changes of the
#    gate), a verdict's `accepted` (an acceptance committed in the checkout that passes it) and
#    `timing` (what the timing runs said); a lock diff lists only the packages that changed,
#    with a count of the rest (`unchanged`). Versions 1-3 are read as 4 (their unchanged
#    packages are kept, as kind "unchanged").
SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)


# The largest JSON report read (`lockguard report`, `accept --from`, `merge`): a report holds
# its runs' curves, each a golden's size at most (golden.MAX_GOLDEN_BYTES); what is larger is
# refused before it is read.
MAX_REPORT_BYTES = 128 * MiB


class ReportError(LockguardError):
    """A report file that cannot be read back (not JSON, not a report, another version)."""


class GitBase(BaseModel):
    """Where the baseline locks of `check --base` were read."""

    model_config = ConfigDict(defer_build=True)

    ref: str  # as given: origin/main
    merge_base: str  # full sha of the merge base of HEAD and `ref`


class GatePolicy(BaseModel):
    """`check --base`: by whose rules the gate judged, and what the checkout changes of them.

    The base's configuration judges (a pull request cannot weaken its own gate); what the pull
    request changes of it is said first in every format, and takes effect once merged."""

    model_config = ConfigDict(defer_build=True)

    source: Literal["base", "pr"]  # pr: --policy pr, or a base with no configuration
    judged_by: str  # "main@1a2b3c4:pyproject.toml", "this checkout's configuration (...)"
    changes: list[str] = Field(default_factory=list)  # one line per changed setting or lock
    config: str | None = None  # the checkout's configuration file (annotations point at it)

    def headline(self) -> str | None:
        """The sentence above the changes; None when the checkout changes nothing and the
        target judges. Whenever the checkout's own configuration judges (--policy pr, or a
        target without one), that is said even with nothing changed."""
        if not self.changes:
            return None if self.source == "base" else f"this PR is judged by {self.judged_by}"
        if self.source == "base":
            return (f"this PR changes the gate: judged by {self.judged_by}, its changes take "
                    "effect once merged")
        return f"this PR changes the gate: judged by {self.judged_by}"


class LockInfo(BaseModel):
    """One lock a run read, as the report names it: its path or git label, hash, role, the
    frameworks it pins and their versions, and the platform it was narrowed to."""

    model_config = ConfigDict(defer_build=True)

    path: str
    lock_hash: str
    role: Literal["candidate", "baseline"] = "candidate"
    frameworks: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)  # framework -> pinned version
    source: str | None = None  # Lock.source: what a LockDiff's old_source/new_source names
    label: str | None = None  # a lock read from git: main@1a2b3c4d:requirements.txt
    format: str | None = None  # a TOML lock's format ("uv.lock"); None: requirements text
    # A multi-platform lock (uv.lock, poetry.lock, a pylock.toml with markers): the platform it
    # was read for, and how many of its packages that platform does not install.
    environment: str | None = None
    left_out: int = 0

    @property
    def name(self) -> str:
        """What a reader calls this lock: its git label, else its path."""
        return self.label or self.path

    @property
    def read_as(self) -> str | None:
        """How the lock was read, for people, when it was narrowed to a platform:
        "uv.lock for cpython 3.11.7 linux x86_64, 3 packages of other platforms, groups or
        extras left out"; None for a lock read as written."""
        if self.environment is None:
            return None
        left = (f", {self.left_out} package{'s' if self.left_out != 1 else ''} of other "
                "platforms, groups or extras left out") if self.left_out else ""
        return f"{self.format or 'lock'} for {self.environment}{left}"


class RuleFailure(BaseModel):
    """A framework family rule a lock breaks (checked before anything is built)."""

    model_config = ConfigDict(defer_build=True)

    lock: str  # display path
    rule: str
    message: str
    lines: list[int] = Field(default_factory=list)  # the lock lines of the pins involved


class ParityRow(BaseModel):
    """Step-0 loss of one scenario family across frameworks: a harness bug shows here first."""

    model_config = ConfigDict(defer_build=True)

    family: str
    step0: dict[str, float]  # scenario id -> loss at step 0
    max_rel_spread: float


class FrameworkRow(BaseModel):
    """One scenario of `compare-frameworks`: how one framework (and execution path) trains a
    model family on this machine. Times are medians over the runs; ratios are computed by the
    flow (lockguard/flows/frameworks.py), never by a renderer."""

    model_config = ConfigDict(defer_build=True)

    family: str  # mlp | lm
    scenario: str
    framework: str
    version: str | None = None  # the framework's version as the run reported it
    execution: str  # eager, torch.compile (inductor), jax.jit (XLA), tf.function + XLA, ...
    device: str  # the device class it was planned for: ×fastest compares runs of one device
    verdict: Verdict  # measured, or what went wrong (broken, compile_fallback, device_fallback)
    runs: int = 0
    step0_loss: float | None = None
    final_loss: float | None = None
    import_s: float | None = None
    first_step_s: float | None = None  # includes compiling or tracing
    step_s: float | None = None  # steady state: the median step after the first
    step_vs_fastest: float | None = None  # step_s / the fastest step_s of its family and device
    peak_memory_bytes: int | None = None
    peak_device_memory_bytes: int | None = None
    # A compiled path against the scenario that runs the same training without it.
    plain: str | None = None
    step_vs_plain: float | None = None
    first_step_vs_plain: float | None = None
    memory_vs_plain: float | None = None
    notes: list[str] = Field(default_factory=list)  # graph breaks, XLA off, fell back


class FrameworkTable(BaseModel):
    """`lockguard compare-frameworks`: the bundled model families in every pinned framework,
    measured on this machine, with the caveats that bound what the figures say."""

    model_config = ConfigDict(defer_build=True)

    device: str  # the devices of the rows, comma-separated
    threads: int
    repeat: int  # runs per scenario, one at a time
    steps: dict[str, int] = Field(default_factory=dict)  # family -> training steps
    # family -> the relative spread of its rows' step-0 losses (report_parts.relative_spread,
    # as the parity rows compute it), where two or more rows have one
    step0_spread: dict[str, float] = Field(default_factory=dict)
    rows: list[FrameworkRow] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)

    def families(self) -> list[tuple[str, list[FrameworkRow]]]:
        """The rows by family, in table order."""
        out: dict[str, list[FrameworkRow]] = {}
        for row in self.rows:
            out.setdefault(row.family, []).append(row)
        return list(out.items())


class Side(BaseModel):
    """One side of a scenario's comparison as its run recorded it (the first of --repeat runs)."""

    model_config = ConfigDict(defer_build=True)

    role: Literal["baseline", "candidate"]
    kind: Literal["golden", "lock"]  # a baseline is a stored golden or a run of the old lock
    name: str  # golden: its file (and hardware class); lock: its label or path
    result: RunResult
    # A candidate's inputs digest (lock, harness, scenario, settings, backend): what a golden
    # `lockguard accept` adopts from this run records, for the unchanged-inputs shortcut.
    inputs_digest: str | None = None


class Evidence(BaseModel):
    """What a scenario's verdict was reached from: the curves, outputs, compile diagnostics and
    timings of both sides, for the HTML report, the artefacts and `lockguard accept`."""

    model_config = ConfigDict(defer_build=True)

    scenario: str
    baseline: Side | None = None  # none when there was nothing to compare with (new, record)
    candidate: Side | None = None  # none when nothing ran (answered from the golden)
    # Fingerprint keys whose values differ between the sides: key -> [baseline, candidate].
    fingerprint_diff: dict[str, list[Any]] = Field(default_factory=dict)


class ShardInfo(BaseModel):
    """Which part of a sharded check a partial Report is (lockguard/flows/shards.py)."""

    model_config = ConfigDict(defer_build=True)

    plan_digest: str  # of the whole plan: parts of different plans are never merged
    index: int = Field(ge=1)  # K of K/N
    total: int = Field(ge=1)  # N
    entry: str  # the plan entry's id: cpu-numpy-1a2b3c4d-1of2
    scenarios: list[str] = Field(default_factory=list)  # the ones this part covers
    order: list[str] = Field(default_factory=list)  # every selected scenario, in report order


class MixTrial(BaseModel):
    """One intermediate lock a bisection tried: the baseline plus some of the candidate's
    changes, and what its run said."""

    model_config = ConfigDict(defer_build=True)

    units: list[str]  # change units taken from the candidate ("numpy", "torch family")
    changes: list[str]  # their package changes, "numpy 1.26.4 → 2.0.2"
    lock: str  # the mix lock written under the cache
    lock_hash: str
    # reproduces: the candidate's failing verdict; baseline: passes like the baseline;
    # inconsistent: the pins' dependency metadata disagree (not built); broken: the build or the
    # run failed; differs: another failing verdict. The last three are ddmin's "unresolved".
    status: Literal["reproduces", "baseline", "inconsistent", "broken", "differs"]
    # A repaired mix: the units' packages kept at the baseline's version so that the mix's
    # pins agree ("ml-dtypes kept at 0.5.4 (ml-dtypes==0.7.0 requires numpy>=2.0.0; ...)");
    # `changes` then lists what it did take.
    kept: list[str] = Field(default_factory=list)
    verdict: str | None = None
    reason: str | None = None
    build_s: float | None = None
    run_s: float | None = None


class Bisection(BaseModel):
    """`bisect` / `check --bisect`: the smallest set of changes that reproduces a scenario's
    failing verdict."""

    model_config = ConfigDict(defer_build=True)

    scenario: str
    framework: str
    verdict: str  # the candidate's verdict being reproduced
    baseline_lock: str
    candidate_lock: str
    units: list[str] = Field(default_factory=list)  # every change unit, in search order
    culprit: list[str] = Field(default_factory=list)  # "numpy 1.26.4 → 2.0.2"
    culprit_units: list[str] = Field(default_factory=list)
    culprit_lines: list[int] = Field(default_factory=list)  # their lines in the candidate lock
    others: int = 0  # package changes outside the culprit set
    found: bool = False  # the culprit set itself was run and reproduced the verdict
    # isolated: it alone reproduces the failure, every other change without it the baseline;
    # implicated: it cannot be told apart from other changes (`sureness` says which and why);
    # suspected: no mix of it could be run. None: not bisected (reports before they existed).
    confidence: Literal["isolated", "implicated", "suspected"] | None = None
    sureness: str | None = None
    # Another culprit, found among the other changes when they reproduce the failure too.
    also: list[str] = Field(default_factory=list)
    strategy: str | None = None  # "binary search", "ddmin", "one unit"
    trials: list[MixTrial] = Field(default_factory=list)
    builds: int = 0  # mix environments prepared (baseline and candidate are the check's)
    bound: int = 0  # ⌈log2 units⌉ + 2, the target for a single culprit
    notes: list[str] = Field(default_factory=list)

    def sentence(self) -> str:
        """'drift in loss_ema caused by numpy 1.26.4 → 2.0.2 (the 5 other changes reproduce
        the baseline)'."""
        if not self.culprit:
            return f"{self.verdict} in {self.scenario}: no culprit found"
        head = f"{self.verdict} in {self.scenario} caused by {' + '.join(self.culprit)}"
        if self.also:
            return head + f", and independently by {' + '.join(self.also)}"
        if self.confidence == "implicated":
            return head + f" (implicated: {self.sureness})"
        if not self.found:
            return head + " (not confirmed: no mix of these alone could be run)"
        if self.others:
            other = "change" if self.others == 1 else "changes"
            verb = "reproduces" if self.others == 1 else "reproduce"
            return head + f" (the {self.others} other {other} {verb} the baseline)"
        return head

    def cost(self) -> str:
        """What the search cost, in one line: mix builds against the bound, change units,
        seconds of build and run, inconsistent mixes skipped, and the strategy."""
        seconds = sum((t.build_s or 0) + (t.run_s or 0) for t in self.trials)
        skipped = sum(t.status == "inconsistent" for t in self.trials)
        return (f"{self.builds} mix build(s) (bound {self.bound}) over {len(self.units)} "
                f"change unit(s), {seconds:.1f} s"
                + (f", {skipped} inconsistent mix(es) skipped" if skipped else "")
                + (f", {self.strategy}" if self.strategy else ""))


class Report(BaseModel):
    """Everything a run of check, record, diff, propose or compare-frameworks found: the locks,
    their diffs, the verdicts and which fail the gate, the evidence behind them; what every
    renderer draws and `--format json` writes (schema_version above)."""

    model_config = ConfigDict(defer_build=True)

    schema_version: int = SCHEMA_VERSION
    lockguard_version: str = __version__
    # Time-ordered and unique (20260101T120000Z-1a2b3c): the name of the report's artefact
    # directory, and what a golden adopted from it by `lockguard accept` names.
    id: str | None = None
    command: Literal["check", "record", "diff", "propose", "compare-frameworks"]
    mode: Literal["golden", "ab", "record", "diff", "frameworks"]
    device: str | None = None
    base: GitBase | None = None  # check --base: the ref and merge base of the baseline
    gate: GatePolicy | None = None  # check --base: whose rules judged, what the change alters
    locks: list[LockInfo] = Field(default_factory=list)
    lock_diffs: list[LockDiff] = Field(default_factory=list)
    verdicts: list[ScenarioVerdict] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)  # per scenario that ran
    bisection: list[Bisection] = Field(default_factory=list)  # --bisect: per failing scenario
    failing: list[str] = Field(default_factory=list)  # scenarios whose verdict fails the gate
    rule_failures: list[RuleFailure] = Field(default_factory=list)
    parity: list[ParityRow] = Field(default_factory=list)
    # compare-frameworks: the measurements table (optional, so version 2 holds it unchanged).
    frameworks: FrameworkTable | None = None
    written: list[str] = Field(default_factory=list)  # golden files written by record
    # This machine's hardware class per device checked (lockguard/hardware.py), where readable.
    hardware: dict[str, HardwareClass] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    # What the runs' lock code was confined to (lockguard/sandbox.py: "bwrap (pid, net, ipc,
    # ro) + landlock 7 (...)"), "off (...)" when it ran bare; None: nothing ran.
    sandbox: str | None = None
    passed: bool = True
    duration_s: float | None = None
    # The command line that made this report (report options left out), for "reproduce with".
    invocation: list[str] = Field(default_factory=list)
    # A partial Report of `check --shard K/N`; `lockguard merge` joins the parts (none after).
    shard: ShardInfo | None = None
    # Where the run's relative paths (locks, goldens) start, as a path from the repository root
    # ("ml" for a project in ml/, "" at the root; files.repo_workdir): annotations name
    # repository files from it wherever the report is rendered again. None: not recorded (a
    # report of an older lockguard), read as the working directory of the rendering.
    workdir: str | None = None
    _failing_set: tuple[int, int, frozenset[str]] = PrivateAttr(default=(0, -1, frozenset()))

    # ------------------------------------------------------------------ what renderers read

    def fails(self, verdict: ScenarioVerdict) -> bool:
        """Whether this scenario fails the gate (the flow applied the policy)."""
        key, size, names = self._failing_set
        if key != id(self.failing) or size != len(self.failing):
            names = frozenset(self.failing)
            self._failing_set = (id(self.failing), len(self.failing), names)
        return verdict.scenario in names

    @property
    def compared(self) -> list[ScenarioVerdict]:
        """The verdicts of scenarios that ran (or were answered from their golden)."""
        return [v for v in self.verdicts if v.verdict != Verdict.skipped]

    @property
    def skipped(self) -> list[ScenarioVerdict]:
        """The verdicts of scenarios that did not run (no lock pins the framework, no such
        device); shown apart from the table, grouped by reason (skipped_groups)."""
        return [v for v in self.verdicts if v.verdict == Verdict.skipped]

    def ordered(self) -> list[ScenarioVerdict]:
        """Compared verdicts, failing first, then by severity; stable within each."""
        return sorted(self.compared, key=lambda v: (not self.fails(v), _rank(v.verdict)))

    def tally(self) -> list[tuple[Verdict, int]]:
        """(verdict, count) for every verdict present, most severe first."""
        counts: dict[Verdict, int] = {}
        for v in self.verdicts:
            counts[v.verdict] = counts.get(v.verdict, 0) + 1
        return sorted(counts.items(), key=lambda item: _rank(item[0]))

    def accepted(self) -> list[ScenarioVerdict]:
        """Failing verdicts that an acceptance committed with the change passes."""
        return [v for v in self.verdicts if v.accepted is not None]

    def failing_tally(self) -> list[tuple[Verdict, int]]:
        """(verdict, count) over the scenarios that fail the gate only, most severe first: what
        a headline says failed."""
        counts: dict[Verdict, int] = {}
        for v in self.verdicts:
            if self.fails(v):
                counts[v.verdict] = counts.get(v.verdict, 0) + 1
        return sorted(counts.items(), key=lambda item: _rank(item[0]))

    def framework_row(self, scenario: str) -> FrameworkRow | None:
        """compare-frameworks: the table's row of `scenario`."""
        rows = self.frameworks.rows if self.frameworks is not None else []
        return next((row for row in rows if row.scenario == scenario), None)

    def notable(self) -> list[ScenarioVerdict]:
        """Compared verdicts that pass the gate but are worth a look (slower, new, moved)."""
        return [v for v in self.ordered()
                if not self.fails(v) and v.verdict not in QUIET_VERDICTS]

    def skipped_groups(self) -> list[tuple[int, str]]:
        """Skipped scenarios collapsed by reason: (count, reason). Scenarios skipped because
        no lock pins their framework share one line naming the frameworks; those an A/B left
        out as its change cannot reach them ("not run: ...") are named before the reason."""
        unpinned: dict[str, int] = {}
        other: dict[str, list[str]] = {}
        for v in self.skipped:
            reason = v.reasons[0] if v.reasons else "not run"
            if reason.startswith(f"no lock pins {v.framework}"):
                unpinned[v.framework] = unpinned.get(v.framework, 0) + 1
            else:
                other.setdefault(reason, []).append(v.scenario)
        groups = []
        if unpinned:
            groups.append((sum(unpinned.values()), "no lock pins " + ", ".join(sorted(unpinned))))
        groups += [(len(ids), f"{', '.join(ids)} {reason}" if reason.startswith("not run: ")
                    else reason) for reason, ids in other.items()]
        return groups

    def bisection_of(self, scenario: str) -> Bisection | None:
        """The bisection run for `scenario` (--bisect), None when it was not bisected."""
        return next((b for b in self.bisection if b.scenario == scenario), None)

    def evidence_of(self, scenario: str) -> Evidence | None:
        """Both sides' RunResults and fingerprint difference for `scenario`, None when it did
        not run (skipped) or the report is older than version 2."""
        return next((e for e in self.evidence if e.scenario == scenario), None)

    def lock_of(self, verdict: ScenarioVerdict,
                role: Literal["baseline", "candidate"] = "candidate") -> LockInfo | None:
        """The lock of `role` a scenario ran from: the one its evidence names (a library
        scenario runs from the lock that pins its libraries too, which need not be the first
        lock pinning its framework), else the first of that role that pins its framework."""
        found = self.evidence_of(verdict.scenario)
        side = getattr(found, role) if found is not None else None
        if side is not None and side.kind == "lock":
            named = next((lock for lock in self.locks
                          if lock.role == role and lock.name == side.name), None)
            if named is not None:
                return named
        return next((lock for lock in self.locks
                     if lock.role == role and verdict.framework in lock.frameworks), None)

    def diff_of(self, lock: LockInfo) -> LockDiff | None:
        """The diff whose candidate side is this lock, None for a baseline lock or one with
        nothing to diff against."""
        return next((d for d in self.lock_diffs if lock.source and d.new_source == lock.source),
                    None)


def _rank(verdict: Verdict) -> int:
    return PRECEDENCE.index(verdict) if verdict in PRECEDENCE else len(PRECEDENCE)
