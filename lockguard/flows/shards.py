"""Sharding on the CI system's own matrix: plan the work, run one part, merge the parts.

lockguard schedules nothing across machines. `lockguard plan` prints the work as matrix entries,
one per (device, framework, lock, shard), each with the runner label its device needs; the CI
system starts one job per entry; each runs `lockguard check --shard K/N`, which filters the
scenario list to its entry and runs the ordinary check flow on it; `lockguard merge` joins the
partial Reports into the Report (and gate decision) an unsharded check would have made.

The plan is a pure function of the config, the locks, the selected scenarios, the options and
the committed goldens (their recorded timings are the cost estimates): the plan job and every
shard job compute the same plan on different machines, without reading any hardware, and its
digest is written into each partial Report so that parts of different plans are never merged.

Balancing: every (device, framework, lock) group gets one entry; the remaining entries go one
at a time to the group whose entries are longest on average (never more entries than
scenarios); inside a group, scenarios are dealt by greedy longest-processing-time. Shards are
balanced by estimated seconds, not by scenario count.

Empty shards: N larger than the number of runnable scenarios leaves entries the plan itself
marks empty. Such a shard runs nothing and passes (its Report says so); a shard the plan gives
scenarios always runs the check flow, whose "nothing was compared" rule applies as usual. The
merged Report applies that rule again to the joined verdicts, so a plan with nothing runnable
fails after merging exactly as the unsharded check does. Scenarios no lock pins are skipped in
the part of shard 1, so the merged Report lists them once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockguard.errors import LockguardError, UsageError
from lockguard.files import ReadError, read_json
from lockguard.flows.pipeline import Planned, plan
from lockguard.flows.report_parts import nothing_done, parity
from lockguard.golden import MAX_GOLDEN_BYTES, GoldenError, class_paths
from lockguard.hardware import HardwareClass
from lockguard.locks.ref import LockRef
from lockguard.names import MAX_SHARDS
from lockguard.report import ShardInfo, Report, load_report
from lockguard.results import Status
from lockguard.scenarios import Scenario, bundled

if TYPE_CHECKING:
    from lockguard.settings import Settings

# Seconds a scenario is assumed to take (import, build of the model, steps) when no golden
# records a timing for it: framework import dominates these small trainings.
DEFAULT_COST_S = {"numpy": 2.0, "torch": 15.0, "jax": 20.0, "tensorflow": 30.0}
# GitHub Actions refuses a matrix of more jobs than this.
MAX_ENTRIES = 256


class ShardError(LockguardError):
    """A plan that cannot be made, or parts that do not join into one Report."""


@dataclass(frozen=True)
class Entry:
    """One part of the work: a CI job's `lockguard check --shard {shard}`."""

    id: str  # cpu-numpy-1a2b3c4d-1of2: stable for the same inputs
    index: int  # K of K/N, 1-based, in plan order
    shard: str  # "K/N", what `check --shard` takes
    device: str
    framework: str | None  # None for an empty entry
    lock: str | None  # display path of the lock its environment is built from
    lock_hash: str | None
    runner: str | list[str] | None  # [tool.lockguard.runners] of the device
    environments: list[str]
    scenarios: list[str]
    cost_s: float  # estimated seconds, from the goldens' timings


@dataclass(frozen=True)
class Plan:
    """The work of one check as `total` CI matrix entries, identical wherever it is made from
    the same inputs; `digest` (of everything else) ties each partial Report to it."""

    total: int
    entries: list[Entry]
    skipped: list[str]  # scenarios no entry runs (no lock pins them): shard 1 reports them
    order: list[str]  # every selected scenario, in the order an unsharded check reports them
    env: str
    digest: str = ""

    def entry(self, index: int) -> Entry:
        """Entry K of K/N, 1-based; K is not checked here (parse_shard and entry_index give
        one in 1..total)."""
        return self.entries[index - 1]

    def to_json(self) -> dict[str, Any]:
        """The plan as plain data: what `plan --format json` prints and the digest hashes."""
        return asdict(self)


@dataclass
class _Group:
    device: str
    framework: str
    ref: LockRef | None
    planned: list[Planned] = field(default_factory=list)
    costs: dict[str, float] = field(default_factory=dict)
    shards: int = 1

    @property
    def cost(self) -> float:
        return sum(self.costs.values())

    @property
    def lock_hash(self) -> str:
        return self.ref.lock.lock_hash if self.ref else "local"


# ----------------------------------------------------------------------------------- the plan

def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` of --shard: 1 <= K <= N <= MAX_SHARDS."""
    match = re.fullmatch(r"([0-9]{1,6})/([0-9]{1,6})", text)
    if match is None or not 1 <= int(match[1]) <= int(match[2]) <= MAX_SHARDS:
        raise UsageError(f"--shard {text}: expected K/N with 1 <= K <= N <= {MAX_SHARDS}, "
                         "e.g. 2/4")
    return int(match[1]), int(match[2])


def parse_entry(text: str) -> str:
    """A plan entry id as `lockguard plan` prints it (`cpu-numpy-1a2b3c4d-2of3`: the second of
    three parts of that device, framework and lock)."""
    _, _, tail = text.rpartition("-")
    match = re.fullmatch(r"([0-9]{1,6})of([0-9]{1,6})", tail)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(f"--plan-entry {text}: not a plan entry id (`lockguard plan` prints "
                         "them, e.g. cpu-numpy-1a2b3c4d-2of3)")
    return text


def entry_index(made: Plan, entry_id: str) -> int:
    """K of the entry `entry_id` in `made`; a ShardError naming the plan's entries if absent
    (another lock, other scenarios or options than the plan was made with)."""
    for entry in made.entries:
        if entry.id == entry_id:
            return entry.index
    raise ShardError(f"--plan-entry {entry_id}: no such entry in this plan (its entries: "
                     f"{', '.join(e.id for e in made.entries)}); run every entry with the "
                     "options the plan was made with")


def estimate(settings: Settings, p: Planned) -> float:
    """The seconds a scenario took when its golden was recorded: the median over the hardware
    classes of its device (the same on every machine that has the repository), else a default
    for its framework."""
    timings = []
    try:
        paths = class_paths(settings.golden_dir, p.device, p.scenario.id)
    except GoldenError:
        paths = []  # the check itself reports an unreadable golden directory
    for path in paths:
        try:
            total = read_json(path, "golden file", MAX_GOLDEN_BYTES)["result"]["timings"][
                "total_s"]
        except (ReadError, KeyError, TypeError):
            continue  # a golden the check will refuse is no estimate, and not the plan's error
        if isinstance(total, (int, float)) and total > 0 and total == total:
            timings.append(float(total))
    return round(statistics.median(timings) if timings else
                 DEFAULT_COST_S.get(p.scenario.framework, 15.0), 3)


def environments(kind: str, group: _Group) -> list[str]:
    """For people reading the plan: the environment an entry of `group` builds with the `kind`
    of backend (the venv or docker image of its lock, or the local interpreter)."""
    if kind == "local":
        return ["the local interpreter"]
    name = group.ref.name if group.ref else "local"
    if kind == "docker":
        return [f"docker image {group.framework}/{group.device} of {name} "
                f"({group.lock_hash[:12]})"]
    return [f"venv of {name} ({group.lock_hash[:12]})"]


def make_plan(settings: Settings, scenarios: list[Scenario], locks: list[LockRef],
              shards: int | None = None) -> Plan:
    """The entries of `shards` parts (default: one per group), deterministic for its inputs."""
    kind = settings.env
    planned = plan(settings, scenarios, locks)
    groups: dict[tuple[str, str, str], _Group] = {}
    for p in planned:
        if p.skip_reason:
            continue
        key = (p.device, p.scenario.framework, p.lock.lock.lock_hash if p.lock else "local")
        group = groups.setdefault(key, _Group(p.device, p.scenario.framework, p.lock))
        group.planned.append(p)
        group.costs[p.scenario.id] = estimate(settings, p)
    ordered = [groups[k] for k in sorted(groups)]
    total = shards if shards is not None else max(1, len(ordered))
    if total < 1 or total > MAX_ENTRIES:
        raise UsageError(f"--shards {total}: between 1 and {MAX_ENTRIES} (a CI matrix's limit)")
    if total < len(ordered):
        raise UsageError(
            f"--shards {total}: the plan has {len(ordered)} groups that each need their own "
            "entry (device, framework, lock: "
            + ", ".join(f"{g.device}/{g.framework}/{g.lock_hash[:8]}" for g in ordered)
            + f"); use at least {len(ordered)}")
    spare = total - len(ordered)
    while spare:
        # The group whose entries are longest on average takes the next entry.
        growable = [g for g in ordered if g.shards < len(g.planned)]
        if not growable:
            break
        widest = max(growable, key=lambda g: (g.cost / g.shards, -ordered.index(g)))
        widest.shards += 1
        spare -= 1

    runners = settings.config.runners
    entries: list[Entry] = []
    for group in ordered:
        bins: list[list[str]] = [[] for _ in range(group.shards)]
        loads = [0.0] * group.shards
        # Longest first, each to the lightest bin (the first of equals): LPT.
        for sid in sorted(group.costs, key=lambda s: (-group.costs[s], s)):
            i = min(range(group.shards), key=lambda b: (loads[b], b))
            bins[i].append(sid)
            loads[i] += group.costs[sid]
        order = [p.scenario.id for p in group.planned]
        for i, mine in enumerate(bins, 1):
            mine.sort(key=order.index)
            index = len(entries) + 1
            entries.append(Entry(
                id=f"{group.device}-{group.framework}-{group.lock_hash[:8]}-{i}of{group.shards}",
                index=index, shard=f"{index}/{total}", device=group.device,
                framework=group.framework,
                lock=group.ref.name if group.ref else None,
                lock_hash=group.ref.lock.lock_hash if group.ref else None,
                runner=getattr(runners, group.device, None),
                environments=environments(kind, group), scenarios=mine,
                cost_s=round(loads[i - 1], 3)))
    device = settings.report_device
    empties = total - len(entries)
    for i in range(1, empties + 1):
        index = len(entries) + 1
        entries.append(Entry(id=f"empty-{i}of{empties}", index=index, shard=f"{index}/{total}",
                             device=device, framework=None, lock=None, lock_hash=None,
                             runner=getattr(runners, device, None), environments=[],
                             scenarios=[], cost_s=0.0))
    made = Plan(total=total, entries=entries,
                skipped=[p.scenario.id for p in planned if p.skip_reason],
                order=[p.scenario.id for p in planned], env=kind)
    body = json.dumps(made.to_json(), sort_keys=True, separators=(",", ":"))
    return Plan(**{**made.__dict__, "digest": "sha256:" + hashlib.sha256(body.encode()).hexdigest()})


def shard_scenarios(made: Plan, index: int, scenarios: list[Scenario]) -> list[Scenario]:
    """The selected scenarios shard `index` runs, in selection order (shard 1 also carries the
    ones no lock pins, so that the merged Report skips them once)."""
    mine = set(made.entry(index).scenarios) | (set(made.skipped) if index == 1 else set())
    return [s for s in scenarios if s.id in mine]


def shard_info(made: Plan, index: int) -> ShardInfo:
    """What a partial Report says of the part it is: the plan's digest, K/N, the entry and
    its scenarios (shard 1's include the skipped ones), and the order merge restores."""
    entry = made.entry(index)
    return ShardInfo(plan_digest=made.digest, index=index, total=made.total, entry=entry.id,
                     scenarios=list(entry.scenarios) + (made.skipped if index == 1 else []),
                     order=made.order)


def empty_report(made: Plan, index: int, command: str = "check") -> Report:
    """The part of a shard the plan gives nothing to run: it passes, and says why."""
    return Report(command=command, mode="golden", passed=True, shard=shard_info(made, index),
                  notes=[f"shard {index}/{made.total}: the plan gives this shard no scenario "
                         "(more shards than scenarios); nothing to run"])


@dataclass(frozen=True)
class ShardPart:
    """The part of a plan one `check --shard K/N` (or `--plan-entry ID`) runs."""

    info: ShardInfo
    scenarios: list[Scenario]  # what it runs; none when the plan gives it nothing
    empty: Report | None  # the Report of a part with nothing to run

    def mark(self, report: Report) -> Report:
        """`report`, said to be this part of the plan."""
        report.shard = self.info
        report.notes.append(f"shard {self.info.index}/{self.info.total} ({self.info.entry}) "
                            f"of plan {self.info.plan_digest[:19]}: a partial report; "
                            "`lockguard merge` joins the parts into the gate's decision")
        return report


def shard_part(shard: str | None, entry: str | None, plan_shards: int | None,
               settings: Settings, chosen: list[Scenario], locks: list[LockRef]
               ) -> ShardPart | None:
    """For `check --shard K/N` or `--plan-entry ID [--shards N]`: the part to run, or None
    without either. An entry id names a part of the plan made with the same options."""
    if plan_shards is not None and entry is None:
        raise UsageError("--shards goes with --plan-entry (`check --shard K/N` says N itself)")
    if shard is None and entry is None:
        return None
    if shard is not None and entry is not None:
        raise UsageError("--shard and --plan-entry are two ways to name one part: use one")
    k, n = parse_shard(shard) if shard is not None else (0, plan_shards)
    made = make_plan(settings, chosen, locks, n)
    if entry is not None:
        k = entry_index(made, parse_entry(entry))
    mine = shard_scenarios(made, k, chosen)
    return ShardPart(shard_info(made, k), mine, empty_report(made, k) if not mine else None)


def plan_document(made: Plan, fmt: str) -> str:
    """The plan as `lockguard plan --format FMT` prints it: text for people, the whole plan as
    JSON, or github-matrix (one line: what `echo "matrix=…" >> "$GITHUB_OUTPUT"` takes)."""
    if fmt == "github-matrix":
        return json.dumps(github_matrix(made), separators=(",", ":")) + "\n"
    if fmt == "json":
        return json.dumps(made.to_json(), indent=2) + "\n"
    return plan_text(made)


def github_matrix(made: Plan) -> dict[str, Any]:
    """`strategy.matrix` for a GitHub workflow: `include` entries of strings and label lists."""
    missing = sorted({e.device for e in made.entries if e.runner is None})
    if missing:
        raise ShardError(
            f"no runner for device {', '.join(missing)}: set it under "
            f"[tool.lockguard.runners] (e.g. {missing[0]} = [\"self-hosted\", \"{missing[0]}\"])")
    return {"include": [
        {"id": e.id, "shard": e.shard, "runner": e.runner, "device": e.device,
         "framework": e.framework or "", "lock": e.lock or "", "lock_hash": e.lock_hash or "",
         "scenarios": " ".join(e.scenarios), "cost_s": e.cost_s}
        for e in made.entries]}


def plan_text(made: Plan) -> str:
    """The plan for people (`lockguard plan`'s text format): a line per entry with its
    estimate, runner and scenarios, then what it builds."""
    lines = [f"{made.total} shard(s), plan {made.digest[:19]}, env {made.env}"]
    for e in made.entries:
        runner = " ".join(e.runner) if isinstance(e.runner, list) else (e.runner or "(none)")
        lines.append(f"{e.shard:>7}  {e.id:<34} ~{e.cost_s:7.1f} s  runs-on {runner}  "
                     f"{' '.join(e.scenarios) or '(empty)'}")
        lines += [f"{'':9}builds {env}" for env in e.environments]
    if made.skipped:
        lines.append(f"skipped (reported by shard 1): {' '.join(made.skipped)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- merging

def merge(parts: list[tuple[Path, Report]]) -> Report:
    """One Report from the partial Reports of every shard of one plan; refuses a missing,
    duplicated or foreign part, naming it."""
    info = _one_plan(parts)
    ranked = sorted((part for _, part in parts), key=lambda r: r.shard.index)  # type: ignore
    full = [r for r in ranked if not _empty(r)] or ranked
    base = full[0]
    position = {sid: i for i, sid in enumerate(info.order)}

    def by_order(items: list[Any]) -> list[Any]:
        return sorted(items, key=lambda x: position.get(x.scenario, len(position)))

    verdicts = by_order([v for r in ranked for v in r.verdicts])
    dupes = sorted({v.scenario for v in verdicts if
                    sum(1 for w in verdicts if w.scenario == v.scenario) > 1})
    if dupes:
        raise ShardError(f"scenario {', '.join(dupes)} reported by more than one shard")
    notes = _unique(n for r in ranked for n in r.notes
                    if not n.startswith(("nothing was ", "shard ")))
    hardware = _hardware(ranked, notes)
    # `check --base` answered from git alone in every part (no lock changed): a pass, as the
    # unsharded check's. Otherwise the gate passes only what it compared, over all parts.
    from_git = all(r.passed and not r.verdicts and r.base is not None for r in full)
    idle = (nothing_done(verdicts, "compared")
            if not base.rule_failures and not from_git else None)
    if idle:
        notes.insert(0, idle)
    failing = {sid for r in ranked for sid in r.failing}
    durations = [r.duration_s for r in ranked if r.duration_s is not None]
    merged = Report(
        command=base.command, mode=base.mode, device=base.device, base=base.base,
        locks=_unique_models(lock for r in ranked for lock in r.locks),
        lock_diffs=_unique_models(d for r in ranked for d in r.lock_diffs),
        verdicts=verdicts, evidence=by_order([e for r in ranked for e in r.evidence]),
        failing=[v.scenario for v in verdicts if v.scenario in failing],
        rule_failures=_unique_models(f for r in ranked for f in r.rule_failures),
        parity=_parity(ranked), written=[w for r in ranked for w in r.written],
        hardware=hardware, notes=notes,
        # Each part's flow applied the policy; a part that failed for a reason that is not a
        # verdict (a family rule) fails the whole. A part that compared nothing (its locks did
        # not change since --base) is judged with the others, by `idle` above.
        passed=not any(_failed(r) for r in ranked) and not idle,
        duration_s=max(durations) if durations else None, invocation=base.invocation,
        workdir=base.workdir)
    return merged


def _one_plan(parts: list[tuple[Path, Report]]) -> ShardInfo:
    """The first part's ShardInfo, once every part is known to be a shard of its plan, of one
    kind of report (command and mode), and given once, with no shard missing; else a
    ShardError naming the part at fault."""
    if not parts:
        raise ShardError("no partial report given")
    first_path, first = parts[0]
    for path, part in parts:
        if part.shard is None:
            raise ShardError(f"{path}: not a shard's report (it has no `shard`; partial reports "
                             "are written by `lockguard check --shard K/N`)")
    info = first.shard
    assert info is not None
    # Parts the plan leaves empty are written as golden checks: compare kinds with a full one.
    ref_path, ref = next(((p, r) for p, r in parts if not _empty(r)), parts[0])
    seen: dict[int, Path] = {}
    for path, part in parts:
        s = part.shard
        assert s is not None
        if s.plan_digest != info.plan_digest or s.total != info.total:
            raise ShardError(f"{path}: shard {s.index}/{s.total} of another plan "
                             f"({s.plan_digest[:19]}; {first_path} is of {info.plan_digest[:19]}"
                             f" with {info.total} shards): run every shard with the same "
                             "config, locks, scenarios and options")
        if (part.command, part.mode) != (ref.command, ref.mode) and not _empty(part):
            raise ShardError(f"{path}: a `{part.command}` ({part.mode}) part beside "
                             f"`{ref.command}` ({ref.mode}) in {ref_path}")
        if s.index in seen:
            raise ShardError(f"shard {s.index}/{s.total} given twice: {seen[s.index]} and {path}")
        seen[s.index] = path
    missing = [k for k in range(1, info.total + 1) if k not in seen]
    if missing:
        raise ShardError(f"shard {', '.join(f'{k}/{info.total}' for k in missing)} missing "
                         f"(given: {', '.join(str(k) for k in sorted(seen))}): a shard that did "
                         "not report is never a pass")
    return info


def _hardware(ranked: list[Report], notes: list[str]) -> dict[str, HardwareClass]:
    """The hardware class per device the parts ran on (the first part's, in shard order); a
    note in `notes` for each device whose parts ran on different classes."""
    hardware: dict[str, HardwareClass] = {}
    for r in ranked:
        for device, cls in r.hardware.items():
            if device in hardware and hardware[device] != cls:
                notes.append(f"the shards ran on different {device} hardware classes "
                             f"({hardware[device].id}, {cls.id})")
            hardware.setdefault(device, cls)
    return hardware


def _failed(part: Report) -> bool:
    """Whether a part fails the merged gate: not when its only failure is that it compared
    nothing, which the merge decides over all parts."""
    idle_only = (not part.failing and not part.rule_failures
                 and any(n.startswith("nothing was compared") for n in part.notes))
    return not part.passed and not idle_only


def _empty(report: Report) -> bool:
    return report.shard is not None and not report.shard.scenarios


def _unique(items: Any) -> list[Any]:
    return list(dict.fromkeys(items))


def _unique_models(items: Any) -> list[Any]:
    out, seen = [], set()
    for item in items:
        key = json.dumps(item.model_dump(mode="json"), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _parity(parts: list[Report]) -> list[Any]:
    """Step-0 parity across frameworks, rebuilt from the candidate runs of every part: a family
    whose frameworks ran on different shards has a row in no part."""
    known = {s.id: s for s in bundled()}
    results = {e.scenario: e.candidate.result for r in parts for e in r.evidence
               if e.candidate and e.scenario in known
               and e.candidate.result.status == Status.ok}
    return parity(known, results)


def merge_files(paths: list[Path]) -> Report:
    """`lockguard merge`: the partial Reports at `paths` joined by `merge`; a ShardError when
    one file is given twice (under any name), a ReportError when one cannot be read."""
    resolved: dict[Path, Path] = {}
    for path in paths:
        key = Path(os.path.realpath(path))
        if key in resolved:
            raise ShardError(f"{path}: given twice (as {resolved[key]})")
        resolved[key] = path
    return merge([(path, load_report(path)) for path in paths])
