"""The git gate: `check --base REF`, A/B between the locks at the merge base and on disk, judged
by the target's rules and run with the target's scenario code.

A pull request must not be able to choose its judge. So the policy — fail_on, tolerances, the
scenario selection, steps, the set of locks, and every other setting — is the configuration at
the tip of REF (what the pull request merges into, not the merge base, which a branch chooses by
where it forks), found as the checkout's own is found: the same upward search from the same
folder, the same file precedence. "The target has no configuration" holds only when there is
none anywhere on that way. The scenario code is part of the judge: both sides run the user
scenarios' scripts, the files beside them and the project's code from a tree of the tip, only
the locks coming from the pull request; and a pull request that changes that code and no lock
runs its code against the tip's, on the same lock (`check_code_changes`). What the pull request
changes of any of it — settings, where its configuration lives, locks, scenario code — is
reported first and takes effect once merged, as CODEOWNERS changes are judged by the base
branch. (`--policy pr` judges by the checkout's own configuration and code, and says so.) A lock
the pull request renames, or names in another lock's place, is paired with the base's lock it
replaces, so its scenarios are compared, never `new`. No path of the gate may be a symbolic
link or lead out of the repository.

Kept apart from the other flows so that the common answer — nothing changed — needs only the
configuration and git: nothing is built, imported or run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lockguard import gitref
from lockguard.config import (
    CONFIG_NAMES, Config, ConfigError, ScenarioConfig, entry_module, lockguard_table,
    parse_config, parse_training, registered_trainings, trainings_dir, with_trainings,
)
from lockguard.files import EscapeError, display_path, refuse_escape, scratch_dir
from lockguard.flows.ab import check_ab
from lockguard.flows.pipeline import CodeTree
from lockguard.flows.report_parts import family_rule_report
from lockguard.locks.parser import parse_lock_text, exported_by
from lockguard.locks.ref import LockRef, lock_target, lock_paths, lock_for
from lockguard.progress import QUIET, Progress
from lockguard.report import GitBase, Report, RuleFailure, GatePolicy

if TYPE_CHECKING:
    from lockguard.flows.pipeline import Backend
    from lockguard.scenarios import Scenario
    from lockguard.settings import Settings

PolicyFrom = Literal["base", "pr"]


@dataclass(frozen=True)
class LockPair:
    """A lock at the merge base and the lock on disk that takes its place."""

    base: Path | None  # its path at the merge base; None: a lock new in this checkout
    head: Path | None  # its path on disk; None: removed
    base_text: str | None
    head_text: str | None
    how: str  # why these two are paired, for people

    @property
    def changed(self) -> bool:
        """Whether the text differs between base and head (a lock added or removed counts;
        line endings do not)."""
        return _normalise(self.base_text) != _normalise(self.head_text)


@dataclass
class Gate:
    """What `check --base` compares, and by whose rules: read from git once, before anything
    is parsed further or run."""

    ref: str
    merge_base: str
    checkout: Config  # the configuration on disk
    judging: Config  # the one whose policy judges (the base's, unless --policy pr)
    policy_from: PolicyFrom
    judged_by: str  # for people: "main@1a2b3c4:pyproject.toml" or "this checkout's ..."
    pairs: list[LockPair]
    changes: list[str] = field(default_factory=list)  # of the gate, by this checkout
    notes: list[str] = field(default_factory=list)
    tip: str = ""  # the target ref's commit, whose configuration and scenario code judge
    repo: Path | None = None  # the repository's root on disk (its real path)
    # Files of user scenarios' code (from the repository's root) this checkout changed since
    # the tip: both sides run the tip's under the base's policy.
    code_changes: list[str] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        """Whether any lock differs from its base (text, presence or name)."""
        return any(p.changed or (p.base is not None and p.head is not None
                                 and _key(p.base) != _key(p.head)) for p in self.pairs)

    def label(self, path: Path) -> str:
        """How reports and errors name `path` as read at the merge base:
        "main@1a2b3c4:requirements.txt"."""
        return f"{short_ref(self.ref)}@{self.merge_base[:7]}:{display_path(path)}"

    def candidate_refs(self) -> list[LockRef]:
        """The locks on disk the judging set names, parsed (what a shard plan is made of)."""
        # Any format, told by the file name (else the content), read for the judging platform.
        target = lock_target(self.judging)
        return [LockRef(p.head, parse_lock_text(p.head_text or "", str(p.head), target))
                for p in self.pairs if p.head is not None]


def open_gate(config: Config, base_ref: str, cli_locks: list[str],
              policy_from: PolicyFrom = "base", *, start: Path | None = None,
              named: Path | None = None) -> Gate:
    """Read the target's configuration (at the tip of `base_ref`, found from `start` as the
    checkout's was: the working directory, or the folder of `named`, the --config file as
    given), pair each lock on disk with the one it replaces at the merge base, and say what
    this checkout changes of the gate: its settings, where its configuration lives, its locks
    and its scenarios' code. A path of the gate that is a symbolic link, or leads out of the
    repository, is refused before anything is read through it."""
    start = Path(os.path.abspath(start if start is not None
                                 else named.parent if named is not None else config.root))
    with gitref.merge_base(config.root, base_ref) as base:
        repo = base.root
        own = [(p, "the configuration file") for p in (named, config.file) if p is not None]
        refuse_escapes(repo, [(start, "the folder the gate runs from"), *own])
        target, target_file = _config_at_tip(base, start, named)
        if target is None:
            _refuse_a_gate_elsewhere(base, start)
        short = short_ref(base_ref)
        if target is None:
            # The target has no gate anywhere the checkout's could be found: this checkout
            # introduces it, and nothing else can judge it.
            judging, source = config, "pr"
            judged_by = (f"this checkout's configuration ({_config_name(config)}: {short} has "
                         f"none from {display_path(start)} up to the repository's root)")
        elif policy_from == "pr":
            judging, source = config, "pr"
            judged_by = f"this checkout's configuration ({_config_name(config)}; --policy pr)"
        else:
            # The trainings the target's test suite registered are judged too: a pull request
            # that deletes a registration does not take its training out of its own gate.
            registered = _tip_trainings(base, target)
            judging, source = with_trainings(target, registered), "base"
            judged_by = f"{short}@{base.tip[:7]}:{target_file}"
        cli = [Path(p).absolute() for p in cli_locks]
        head_paths = cli or _configured(config)
        base_paths = _configured(target) if target is not None else []
        # The target's locks too: the check reads them on disk where this checkout keeps them.
        refuse_escapes(repo, [(p, "a lock") for p in (*head_paths, *base_paths)])
        refuse_links(base, [(p, "a lock") for p in base_paths], at=base.commit,
                     where=f"{short}@{base.commit[:7]}")
        scripts = _scripts(judging) | _scripts(config)
        refuse_escapes(repo, [(p, "a scenario script") for p in sorted(scripts)])
        if target is not None:
            refuse_links(base, [(p, "a scenario script") for p in sorted(_scripts(target))],
                         at=base.tip, where=f"{short}@{base.tip[:7]}")
        pairs = _pair(base, base_paths, head_paths, keep_base=source == "base" and not cli)
        gate = Gate(ref=base_ref, merge_base=base.commit, checkout=config, judging=judging,
                    policy_from=source, judged_by=judged_by, pairs=pairs, tip=base.tip,
                    repo=repo)
        if target is not None:
            gate.changes = _config_moved(base, short, target_file, config)
            gate.changes += config_changes(target, config)
            if source == "base":
                gate.changes += _registration_changes(base, short, registered, config)
        gate.changes += _pair_changes(gate)
        if target is not None:
            gate.code_changes = _code_changed(base, judging, config)
            runs = "the check runs this checkout's" if source == "pr" else \
                f"the check runs {short}'s"
            gate.changes += _listed(
                [f"scenario code: {name} changed ({runs})" for name in gate.code_changes])
        dirty = base.dirty([p.head for p in pairs if p.head is not None])
    if not pairs:
        # What lock_paths says when nothing names a lock at all.
        lock_paths(judging, [])
    if dirty:
        gate.notes.append("checking what is on disk: uncommitted changes in "
                          + ", ".join(display_path(p) for p in dirty))
    return gate


def check_base(settings: Settings, gate: Gate, scenarios: list[Scenario],
               progress: Progress = QUIET, backend: Backend | None = None) -> Report:
    """A/B between each lock at the merge base and the lock that takes its place on disk,
    under the judging configuration (`settings` are resolved from gate.judging): the gate
    resolved into baseline and candidate locks, then flows.ab.check_ab. When no lock changed,
    the answer comes from git alone."""
    start = time.perf_counter()
    base = GitBase.model_construct(ref=gate.ref, merge_base=gate.merge_base)
    notes = list(gate.notes)
    policy = _policy_info(gate)
    users = [s for s in scenarios if s.script is not None]
    if not gate.moved:
        return _no_lock_moved(settings, gate, users, progress, backend, notes, start)

    candidates, baseline, moved, paired = _sides(gate, notes)
    stale, in_step = _stale_exports(gate, candidates, moved, paired)
    if stale:
        return Report(command="check", mode="ab", notes=notes, passed=False, base=base,
                      gate=policy, rule_failures=stale,
                      duration_s=time.perf_counter() - start)
    if not moved:  # only comments or layout: no lock's pins moved
        return _no_lock_moved(settings, gate, users, progress, backend, notes, start)

    def hash_of(ref: LockRef | None) -> str | None:
        return ref.lock.lock_hash if ref is not None else None

    # Only scenarios whose lock moved, where a check of the whole set runs them (the first lock
    # that pins their framework) against the base's (the same rule over every base lock, the
    # removed ones included): the rest cannot have changed. A framework moved into another
    # lock, or into a renamed one git did not pair, is compared all the same.
    mine = [s for s in scenarios if lock_for(s, candidates) is not None
            and hash_of(lock_for(s, candidates)) != hash_of(lock_for(s, baseline))]
    # Moved locks the base's set names; an export that moved in step with its uv.lock is
    # compared through it.
    judged = [ref for ref in moved if id(ref) in paired and id(ref) not in in_step]
    notes += [f"{display_path(ref.path)} moved in step with {display_path(source.path)}, which "
              "it is exported from: compared through it" for ref, source in in_step.values()]
    if not mine and not judged:
        if moved:
            notes.append(f"no selected scenario runs from a lock new since {gate.ref}")
        return Report(command="check", mode="ab", notes=notes, passed=True, base=base,
                      gate=policy, duration_s=time.perf_counter() - start)
    run_new = list({id(r): r for s in mine if (r := lock_for(s, candidates))}.values())
    unrun = _unrun(judged, run_new, candidates) if run_new else []
    run_new = run_new or judged  # none: "nothing was compared", which fails (the locks moved)
    run_old = list({id(r): r for s in mine if (r := lock_for(s, baseline))}.values()) \
        or [paired[id(ref)] for ref in judged]
    report = family_rule_report("check", moved)
    if report is None:
        # Under the base's policy both sides run the target's scenario code, only the locks
        # differing; under --policy pr this checkout's.
        with _target_code(gate, mine) as tree:
            # Each lock against the one git paired it with (a rename, the same path).
            report = check_ab(settings, run_new, run_old, mine, progress, backend,
                              code=(tree, tree), partners={
                                  id(r): paired[id(r)] for r in run_new if id(r) in paired})
        report = _with_code_check(report, settings, gate, [s for s in mine if s.script],
                                  progress, backend)
    if unrun:
        report.rule_failures = [*report.rule_failures, *unrun]
        report.passed = False
    report.notes = notes + report.notes
    report.base = base
    report.gate = policy
    return report


def _no_lock_moved(settings: Settings, gate: Gate, users: list[Scenario], progress: Progress,
                   backend: Backend | None, notes: list[str], start: float) -> Report:
    """No lock's pins moved: the user scenarios' code A/B when their code changed (under the
    target's policy, unless it leaves code to other checks), else the answer from git alone."""
    if gate.code_changes and users and gate.policy_from == "base" \
            and gate.judging.check_code_changes:
        return _check_code(settings, gate, users, progress, backend, notes, start)
    notes.append(f"no lock changed since {gate.ref} (merge base {gate.merge_base[:12]}): "
                 "nothing to check")
    # Nothing ran: lockguard's own values, not validated (as flows/check.py's shortcut).
    return Report.model_construct(
        command="check", mode="ab", notes=notes, passed=True,
        base=GitBase.model_construct(ref=gate.ref, merge_base=gate.merge_base),
        gate=_policy_info(gate), duration_s=time.perf_counter() - start)


def _unrun(judged: list[LockRef], run: list[LockRef], candidates: list[LockRef]) -> list:
    """A failing rule for each moved lock no selected scenario runs from (they run from the
    first lock that pins their framework): its change would pass unchecked."""
    ran = {id(r) for r in run}
    out = []
    for ref in judged:
        if id(ref) in ran:
            continue
        first = [c for c in candidates if c is not ref
                 and c.lock.frameworks() & ref.lock.frameworks()]
        why = (f"the scenarios of its frameworks run from {first[0].name}, the first lock "
               "that pins them" if first else "no selected scenario runs from it")
        out.append(RuleFailure(
            lock=ref.name, rule="moved lock not compared",
            message=f"it moved, but {why}: nothing compares its change; move that change "
                    f"into a pull request of its own, or name it with --lock {ref.name}",
            lines=[]))
    return out


def _with_code_check(report: Report, settings: Settings, gate: Gate, users: list[Scenario],
                     progress: Progress, backend: Backend | None) -> Report:
    """A lock A/B (run with the target's code) of a pull request that also changed the user
    scenarios' code: that code is judged too, on the new lock against the target's. A failing
    verdict there fails the gate as a rule (the lock change and the code change are to be
    accepted apart: one pull request each), a passing one is noted."""
    if not (gate.code_changes and users and gate.policy_from == "base"
            and gate.judging.check_code_changes):
        return report

    code = _check_code(settings, gate, users, progress, backend, [], time.perf_counter())
    failing = [v for v in code.verdicts if code.fails(v)]
    for v in failing:
        report.rule_failures = [*report.rule_failures, RuleFailure(
            lock=v.scenario, rule="scenario code changed with the lock",
            message=f"this pull request's code of {v.scenario} trains otherwise than "
                    f"{short_ref(gate.ref)}'s on the new lock ({v.verdict.value}: "
                    f"{'; '.join(v.reasons[:1])}): change the code and the lock in two pull "
                    "requests, each judged (and accepted) on its own", lines=[])]
    if failing:
        report.passed = False
    else:
        report.notes.append("the scenarios' code changed too: on the new lock it trains as "
                            f"{short_ref(gate.ref)}'s does")
    return report


def _sides(gate: Gate, notes: list[str]) -> tuple[list[LockRef], list[LockRef], list[LockRef],
                                                   dict[int, LockRef]]:
    """The gate's pairs parsed: (every lock on disk, in the judging order; every base lock,
    those paired with one first, then those removed; the candidates whose pins differ from
    their base's, or are new; id(candidate) -> its base lock), what they say for people
    appended to `notes`."""
    candidates: list[LockRef] = []
    baseline: list[LockRef] = []  # the paired ones first, then those removed
    removed: list[LockRef] = []
    moved: list[LockRef] = []
    paired: dict[int, LockRef] = {}
    # Each lock in its own format (a project may mix them), told by its file name at its side
    # (else its content), read for the platform the judging configuration builds for.
    target = lock_target(gate.judging)

    def at_base(pair: LockPair) -> LockRef:
        where = f"{gate.ref}:{display_path(pair.base)}"
        return LockRef(Path(where), parse_lock_text(pair.base_text or "", where, target,
                                                    name=pair.base.name),
                       label=gate.label(pair.base))  # errors name the ref

    for pair in gate.pairs:
        if pair.head is None:
            notes.append(f"{display_path(pair.base)} was removed since {gate.ref}")
            # Still the baseline of what it pinned: a framework moved into another lock, or
            # a lock renamed past git's rename detection, is compared with it, never `new`.
            removed.append(at_base(pair))
            continue
        new = LockRef(pair.head, parse_lock_text(pair.head_text or "", str(pair.head), target))
        candidates.append(new)
        if pair.base is None:
            notes.append(f"{display_path(pair.head)} is new since {gate.ref}")
            moved.append(new)
            continue
        old = at_base(pair)
        baseline.append(old)
        paired[id(new)] = old
        if old.lock.lock_hash != new.lock.lock_hash:
            moved.append(new)
        elif pair.changed:
            notes.append(f"{display_path(pair.head)}: only comments or layout changed since "
                         f"{gate.ref}")
    return candidates, baseline + removed, moved, paired


def _stale_exports(gate: Gate, candidates: list[LockRef], moved: list[LockRef],
                   paired: dict[int, LockRef]) -> tuple[list, dict[int, tuple[LockRef, LockRef]]]:
    """A failing rule for each lock exported from a uv.lock the gate also checks (its header
    names the `uv export` command, it lies beside the uv.lock, and at the merge base the two
    pinned alike) that moved without it, or apart from it: one of the two is stale, and a
    check of the pair would compare one side's change with nothing. And the exports that moved
    in step with their uv.lock (id → (export, uv.lock)): the uv.lock's A/B compares them."""
    texts = {p.head: p.head_text or "" for p in gate.pairs if p.head is not None}
    sources = {ref.path.parent: ref for ref in candidates if ref.path.name == "uv.lock"}
    out, in_step = [], {}
    for ref in candidates:
        command = exported_by(texts.get(ref.path, ""))
        source = sources.get(ref.path.parent)
        if command is None or source is None:
            continue
        then = [paired.get(id(x)) for x in (ref, source)]
        if None in then or _pins(then[0]) != _pins(then[1]):
            continue  # another project's export beside it, or never in step: not derived
        mine, theirs = (any(r is x for r in moved) for x in (ref, source))
        shown, of = display_path(ref.path), display_path(source.path)
        if mine and theirs:
            # Both moved: the export must pin what the uv.lock pins (both read for the same
            # platform), else one of them moved apart.
            if _pins(ref) == _pins(source):
                in_step[id(ref)] = (ref, source)
                continue
            message = (f"does not pin what {of}, which it is exported from, pins (both "
                       f"moved, apart): run `{command}` and commit it with {of}")
        elif mine == theirs:
            continue
        else:
            message = (f"exported from {of}, which this change moved: it still holds the old "
                       f"pins; run `{command}` and commit it with {of}" if theirs else
                       f"moved, but {of}, which it is exported from, did not: the next "
                       f"`{command}` undoes it; change {of} (uv lock --upgrade-package NAME) "
                       "and export again")
        out.append(RuleFailure(lock=shown, rule="stale export", message=message, lines=[]))
    return out, in_step


def _pins(ref: LockRef) -> set[tuple[str, str]]:
    return {(p.name, p.version) for p in ref.lock.pins}


@contextlib.contextmanager
def _target_code(gate: Gate, scenarios: list[Scenario]) -> Iterator[CodeTree | None]:
    """The target's tip extracted from git (a scratch folder, removed after), where the user
    scenarios among `scenarios` take their code from under the base's policy; None where no
    user scenario runs or this checkout's code is the policy's (--policy pr, or a target
    without a gate)."""
    if gate.policy_from != "base" or gate.repo is None \
            or not any(s.script is not None for s in scenarios):
        yield None
        return

    with scratch_dir("tip") as tmp, gitref.merge_base(gate.repo, gate.ref, fetch=False) as base:
        base.extract(Path(tmp), at=gate.tip)
        yield CodeTree(repo=gate.repo, root=Path(tmp),
                       label=f"{short_ref(gate.ref)}@{gate.tip[:7]}")


def _check_code(settings: Settings, gate: Gate, users: list[Scenario], progress: Progress,
                backend: Backend | None, notes: list[str], start: float) -> Report:
    """No lock moved, but the user scenarios' code did: each runs on the same lock (this
    checkout's, which is the merge base's) with the target's code as the baseline and this
    checkout's as the candidate, judged by the target's policy; an intended change passes
    through `accept`, as for a lock."""
    candidates = gate.candidate_refs()
    runs = [s for s in users if lock_for(s, candidates) is not None]
    with _target_code(gate, runs) as tree:
        label = tree.label if tree is not None else short_ref(gate.ref)
        baseline = [dataclasses.replace(ref, label=f"{ref.name} with {label}'s scenario code")
                    for ref in candidates]
        report = check_ab(settings, candidates, baseline, runs, progress, backend,
                          code=(tree, None),
                          partners={id(c): b for c, b in zip(candidates, baseline)})
    notes.append(f"no lock changed since {gate.ref}, but the scenarios' code did: each ran "
                 f"with {short_ref(gate.ref)}'s code and with this checkout's, on this "
                 "checkout's lock (check_code_changes = false in the target's configuration "
                 "leaves code changes to other checks)")
    report.notes = notes + report.notes
    report.base = GitBase.model_construct(ref=gate.ref, merge_base=gate.merge_base)
    report.gate = _policy_info(gate)
    report.duration_s = time.perf_counter() - start
    return report


def _policy_info(gate: Gate):
    config = gate.checkout.file
    return GatePolicy.model_construct(source=gate.policy_from, judged_by=gate.judged_by,
                                      changes=list(gate.changes),
                                      config=display_path(config) if config else None)


# ----------------------------------------------------------------------- the target's config

def _config_at_tip(base: gitref.BaseTree, start: Path,
                   named: Path | None) -> tuple[Config | None, str | None]:
    """The target's configuration, at the tip of its ref, found as load_config finds the
    checkout's: the --config file as named (`named`), else upwards from `start` to the
    repository's root, lockguard.toml before pyproject.toml in each folder, a pyproject.toml
    only with a [tool.lockguard] table. (None, None) when there is none on that whole way."""
    root = base.root
    here = Path(os.path.realpath(start))
    order = [Path(os.path.abspath(named))] if named is not None else []
    if here == root or root in here.parents:
        for directory in (here, *here.parents):
            order += [directory / name for name in CONFIG_NAMES]
            if directory == root:
                break
    order = list(dict.fromkeys(order))
    where = f"{short_ref(base.ref)}@{base.tip[:7]}"
    for path, text in zip(order, base.texts(order, at=base.tip)):
        if text is None:
            continue
        rel = base.rel(path)
        refuse_links(base, [(path, "the configuration")], at=base.tip, where=where)
        # Named as git names it, from the repository's root: main:ml/pyproject.toml.
        source = f"{short_ref(base.ref)}:{rel}"
        section = lockguard_table(text, path.name, source)
        if section is None:
            continue
        if path.name == "pyproject.toml":
            source += " [tool.lockguard]"
        return parse_config(section, source, path.parent, path), rel
    return None, None


def refuse_escapes(repo: Path, paths: list[tuple[Path, str]]) -> None:
    """files.EscapeError for the first of `paths` (path, what it is) on disk that is or lies
    below a symbolic link, or leads out of the repository at `repo`."""
    for path, what in paths:
        refuse_escape(path, repo, what)


def refuse_links(base: gitref.BaseTree, paths: list[tuple[Path, str]], *, at: str,
                 where: str) -> None:
    """files.EscapeError for the first of `paths` that git records as a symbolic link (or
    below one) at the commit `at` (`where` names it: "main@1a2b3c4")."""
    linked = set(base.links([p for p, _ in paths], at=at))
    for path, what in paths:
        if path in linked:
            raise EscapeError(f"{where}:{base.rel(path)}: {what}, which git records as a "
                              "symbolic link: lockguard reads none through a link")


def _config_moved(base: gitref.BaseTree, short: str, target_file: str | None,
                  config: Config) -> list[str]:
    """The gate change of a configuration this checkout keeps elsewhere than the target."""
    here = base.rel(config.file) if config.file is not None else None
    if here == target_file:
        return []
    return [f"configuration: {short}'s is {target_file}, this checkout's "
            + (f"is {here}" if here else "is none") + " (judged by "
            f"{short}'s; this checkout's takes effect once merged)"]


def _refuse_a_gate_elsewhere(base: gitref.BaseTree, start: Path) -> None:
    """When no configuration of the target's lies on the way from `start` up, one elsewhere
    in its tree means the gate was started from the wrong folder (or the pull request moved
    the folder under it): an error, not "the target has none"."""
    names = [n for n in base.files(at=base.tip) if n.rsplit("/", 1)[-1] in CONFIG_NAMES]
    pyprojects = [n for n in names if n.endswith("pyproject.toml")]
    texts = dict(zip(pyprojects, base.named(pyprojects, at=base.tip)))
    found = [n for n in names if n.endswith("lockguard.toml")
             or "[tool.lockguard" in (texts.get(n) or "")]
    if found:
        where = f"{short_ref(base.ref)}@{base.tip[:7]}"
        raise ConfigError(f"{where} has a lockguard configuration ({', '.join(found[:3])}) but "
                          f"none on the way from {display_path(start)} up to the repository's "
                          "root: run the gate from the folder it configures (the action's "
                          "working-directory), or name it with --config")


def _tip_trainings(base: gitref.BaseTree, target: Config) -> dict[str, ScenarioConfig]:
    """The trainings registered in the target's golden store at its tip (config.
    registered_trainings, read from git): none where golden_dir lies outside the
    repository."""
    try:
        folder = base.rel(trainings_dir(target)).rstrip("/") + "/"
    except gitref.GitRefError:
        return {}
    names = [n for n in base.files(at=base.tip) if n.startswith(folder)
             and n.endswith(".toml") and "/" not in n[len(folder):]]
    where = f"{short_ref(base.ref)}@{base.tip[:7]}"
    out = {}
    for name, text in zip(names, base.named(names, at=base.tip)):
        if text is not None:
            sid = name[len(folder):].removesuffix(".toml")
            source = f"{where}:{name}"
            out[sid] = parse_training(lockguard_table(text, "training.toml", source) or {},
                                      sid, source)
    return out


def _registration_changes(base: gitref.BaseTree, short: str,
                          registered: dict[str, ScenarioConfig], config: Config) -> list[str]:
    """What this checkout changed of the target's registered trainings (`registered`, read
    at its tip), which judge under --policy base whatever the checkout's files say: one
    deleted or edited. A registration only this checkout has is judged as it stands
    (docs/scenarios.md): a new training is the pull request's own."""
    mine = {sid: table for sid, (table, _) in registered_trainings(config).items()}
    gone = [sid for sid in sorted(registered) if sid not in mine and sid not in config.scenario]
    edited = [sid for sid in sorted(registered) if sid in mine and mine[sid] != registered[sid]]
    if not gone and not edited:
        return []
    # Only now: the folder in git's spelling, which a golden_dir outside the repository has
    # none of (and then the target registered nothing git holds).
    folder = base.rel(trainings_dir(config))
    return ([f"the test suite's training {sid} unregistered ({folder}/{sid}.toml removed): "
             f"{short}'s registration still judges it" for sid in gone]
            + [f"the test suite's training {sid}'s registration edited ({folder}/{sid}.toml "
               f"changed): {short}'s registration still judges it" for sid in edited])


def _scripts(config: Config) -> set[Path]:
    """Each user scenario's script, or its entry's module file (one not found is left out:
    the scenario's own ConfigError names it)."""
    found = {config.resolve(sc.script) if sc.script is not None
             else entry_module(config.root, sc.entry) for sc in config.scenario.values()}
    return {p for p in found if p is not None}


def _code_changed(base: gitref.BaseTree, judging: Config, checkout: Config) -> list[str]:
    """The files of user scenarios' code this checkout changed since the target's tip, from
    the repository's root: every file beside a scenario script (the script, its modules, its
    data), and the project's own Python files (the judging configuration's folder's)."""
    folders = {base.rel(p.parent) for p in _scripts(judging) | _scripts(checkout)}
    if not folders:
        return []
    project = base.rel(judging.root)
    # The project's folder whole (its model code, its hyperparameter files) and every Python
    # file of the repository (a monorepo's shared code, which runs import), as this pull
    # request changed them: from the merge base, so that a branch behind the target is not
    # blamed for the target's own changes.
    changed = base.changed(at=base.commit, pathspecs=[
        *sorted(folders), project or ".", ":(glob)**/*.py"])
    # What the gate says of otherwise: the locks, the configurations, the goldens.
    own = {base.rel(p) for c in (judging, checkout) for p in _configured(c)}
    own |= {base.rel(c.file) for c in (judging, checkout) if c.file is not None}
    goldens = set()
    for c in (judging, checkout):
        with contextlib.suppress(gitref.GitRefError):  # a golden_dir outside the repository
            goldens.add(base.rel(c.resolve(c.golden_dir)) + "/")
    return [name for name in changed
            if name not in own and not any(name.startswith(g) for g in goldens)]


def _listed(lines: list[str], most: int = 10) -> list[str]:
    """`lines`, the first `most` of them, then how many more."""
    if len(lines) <= most:
        return lines
    return lines[:most] + [f"... and {len(lines) - most} more changed files of scenario code"]


def _config_name(config: Config) -> str:
    return display_path(config.file) if config.file is not None else "no configuration file"


# What a reader calls each setting's default, where the value itself says little.
_DEFAULT_WORDS = {
    "tolerance": "the per-dtype default (torch.testing's)",
    "fail_on": "the default (drift, compile_fallback, device_fallback, broken, incomparable)",
    "scenarios": "all that apply",
    "steps": "each scenario's own",
    "lock": "none", "locks": "none", "python": "the one running lockguard",
}


def config_changes(base: Config, head: Config) -> list[str]:
    """Each setting `head` changes from `base`, one line each: 'tolerance: the per-dtype
    default → rtol 1e+300, atol 1e+300'."""
    # Which locks are checked, and against what, is said per lock by the pairing (below).
    skip = {"lock", "locks"}
    old, new = (_flat(c.model_dump(mode="json", exclude=skip)) for c in (base, head))
    lines = []
    for key in sorted(set(old) | set(new), key=_order):
        a, b = old.get(key), new.get(key)
        if a != b:
            lines.append(f"{key}: {_show(key, a)} → {_show(key, b)}")
    return lines


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Settings as dotted keys; a table that is a value (a tolerance, a lock entry) stays one
    value, so it is said whole."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and key in ("scenario", "runners") or prefix.startswith(
                "scenario.") and prefix.count(".") == 1 and isinstance(value, dict) \
                and key != "tolerance":
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


def _order(key: str) -> tuple[int, str]:
    # The settings that decide pass or fail first.
    first = ("fail_on", "tolerance", "scenarios", "lock", "locks", "steps", "scenario")
    head = key.split(".", 1)[0]
    return (first.index(head) if head in first else len(first), key)


def _show(key: str, value: Any) -> str:
    last = key.rsplit(".", 1)[-1]
    if value is None:
        return "(unset)" if key.startswith("scenario.") and last != "tolerance" else \
            _DEFAULT_WORDS.get(last, "the default")
    if isinstance(value, dict) and {"rtol", "atol"} <= set(value):
        return "exact" if value.get("exact") else f"rtol {value['rtol']:g}, atol {value['atol']:g}"
    if isinstance(value, list):
        if not value:
            return "[] (nothing)" if last == "fail_on" else "[]"
        return ", ".join(_show(key, v) if isinstance(v, dict) else str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} = {v}" for k, v in value.items() if v is not None)
    return str(value)


def _pair_changes(gate: Gate) -> list[str]:
    """The locks this checkout names otherwise than the base, and how each is paired."""
    out = []
    for pair in gate.pairs:
        if pair.base is None:
            out.append(f"lock {display_path(pair.head)} is new: its scenarios have no baseline")
        elif pair.head is None:
            out.append(f"lock {display_path(pair.base)} was removed")
        elif pair.how == KEPT:
            out.append(f"lock {display_path(pair.base)}: this checkout's configuration no longer "
                       f"names it; checked all the same ({gate.ref}'s configuration names it)")
        elif _key(pair.base) != _key(pair.head):
            out.append(f"lock {display_path(pair.base)} → {display_path(pair.head)} "
                       f"({pair.how}): compared with {display_path(pair.base)} at {gate.ref}")
    return out


# ------------------------------------------------------------------------------- pairing

def _key(path: Path) -> str:
    return os.path.realpath(path)


def _configured(config: Config) -> list[Path]:
    return [config.resolve(entry.path) for entry in config.lock_entries()]


KEPT = "kept"  # a base lock the checkout's configuration no longer names, still on disk


def _pair(base: gitref.BaseTree, base_paths: list[Path], head_paths: list[Path], *,
          keep_base: bool) -> list[LockPair]:
    """Each lock on disk with the base's lock it replaces: the same path; else the base lock
    git's rename detection says it was; else the base configuration's lock in the same position
    (a lock named in another's place). With `keep_base` (the base's policy: its set of locks),
    every base lock is checked — under its own name if it is still on disk, as removed if not.
    A lock with no base counterpart is new."""
    at_base = {_key(p): base.text(p) for p in (*base_paths, *head_paths)}
    on_disk = {_key(p): gitref.disk_text(p) for p in (*base_paths, *head_paths)}
    renamed: dict[str, Path] = {}
    if any(at_base[_key(p)] is None for p in head_paths) \
            or any(on_disk[_key(p)] is None for p in base_paths):
        renamed = {_key(old): new for old, new in base.renames(base_paths).items()}
    taken: set[str] = set()
    pairs: list[LockPair] = []
    head_keys = {_key(p) for p in head_paths}
    for i, head in enumerate(head_paths):
        key = _key(head)
        source: Path | None = None
        if at_base[key] is not None:
            source, how = head, "same path"
        else:
            source = next((old for old in base_paths if _key(old) not in taken
                           and key == _key(renamed.get(_key(old), old))
                           and _key(old) in renamed), None)
            how = "renamed, as git sees it"
            if source is None and i < len(base_paths) and _key(base_paths[i]) not in head_keys \
                    and _key(base_paths[i]) not in taken:
                source, how = base_paths[i], "named in its place in the configuration"
        if source is None:
            pairs.append(LockPair(None, head, None, on_disk[key], "new"))
            continue
        taken.add(_key(source))
        pairs.append(LockPair(source, head, at_base[_key(source)], on_disk[key], how))
    if keep_base:
        for path in base_paths:
            if _key(path) in taken:
                continue
            taken.add(_key(path))
            moved_to = renamed.get(_key(path))
            if on_disk[_key(path)] is not None:
                pairs.append(LockPair(path, path, at_base[_key(path)], on_disk[_key(path)],
                                      KEPT))
            elif moved_to is not None:
                pairs.append(LockPair(path, moved_to, at_base[_key(path)],
                                      gitref.disk_text(moved_to), "renamed, as git sees it"))
            else:
                pairs.append(LockPair(path, None, at_base[_key(path)], None, "removed"))
    return pairs


def _normalise(text: str | None) -> str | None:
    return None if text is None else text.replace("\r\n", "\n")


def short_ref(ref: str) -> str:
    """How a reader names the base branch: origin/main and refs/heads/main are `main`."""
    for prefix in ("refs/heads/", "refs/remotes/", "refs/"):
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
            break
    return ref.removeprefix("origin/")
