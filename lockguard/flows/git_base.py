"""The git gate: `check --base REF`, A/B between the locks at the merge base and on disk, judged
by the base's rules.

A pull request must not be able to switch off the gate that judges it. So the policy — fail_on,
tolerances, the scenario selection, steps, the set of locks, and every other setting — is the
configuration at the merge base, as CODEOWNERS changes are judged by the base branch: what the
pull request changes of it is reported first and takes effect once merged. (`--policy pr` judges
by the checkout's own configuration, for a team that wants that, and says so.) A lock the pull
request renames, or names in another lock's place, is paired with the base's lock it replaces,
so its scenarios are compared, never `new`.

Kept apart from the other flows so that the common answer — no lock changed — needs only the
configuration and git: nothing is built, imported or run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lockguard import gitref
from lockguard.config import CONFIG_NAMES, Config, lockguard_table, parse_config
from lockguard.files import display_path
from lockguard.progress import QUIET, Progress

if TYPE_CHECKING:
    from lockguard.flows.pipeline import Backend
    from lockguard.locks.ref import LockRef
    from lockguard.report import Report
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
        from lockguard.locks.parser import parse_lock_text
        from lockguard.locks.ref import LockRef, lock_target

        # Any format, told by the file name (else the content), read for the judging platform.
        target = lock_target(self.judging)
        return [LockRef(p.head, parse_lock_text(p.head_text or "", str(p.head), target))
                for p in self.pairs if p.head is not None]


def open_gate(config: Config, base_ref: str, cli_locks: list[str],
              policy_from: PolicyFrom = "base") -> Gate:
    """Read the merge base's configuration and locks, pair each lock on disk with the one it
    replaces, and say what this checkout changes of the gate."""
    with gitref.merge_base(config.root, base_ref) as base:
        base_config, base_file = _config_at(base, config)
        if base_config is None:
            # The base has no gate: this checkout introduces it, and nothing else can judge it.
            judging, source = config, "pr"
            judged_by = f"this checkout's configuration ({_config_name(config)}: {base_ref} has " \
                        "none)"
        elif policy_from == "pr":
            judging, source = config, "pr"
            judged_by = f"this checkout's configuration ({_config_name(config)}; --policy pr)"
        else:
            judging, source = base_config, "base"
            judged_by = f"{short_ref(base_ref)}@{base.commit[:7]}:{base_file}"
        cli = [Path(p).absolute() for p in cli_locks]
        head_paths = cli or _configured(config)
        base_paths = _configured(base_config) if base_config is not None else []
        pairs = _pair(base, base_paths, head_paths, keep_base=source == "base" and not cli)
        gate = Gate(ref=base_ref, merge_base=base.commit, checkout=config, judging=judging,
                    policy_from=source, judged_by=judged_by, pairs=pairs)
        if base_config is not None:
            gate.changes = config_changes(base_config, config)
        gate.changes += _pair_changes(gate)
        if gate.moved:
            gate.changes += _script_changes(base, base_config, config)
        dirty = base.dirty([p.head for p in pairs if p.head is not None])
    if not pairs:
        # What lock_paths says when nothing names a lock at all.
        from lockguard.locks.ref import lock_paths

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
    from lockguard.report import GitBase, Report

    start = time.perf_counter()
    base = GitBase.model_construct(ref=gate.ref, merge_base=gate.merge_base)
    notes = list(gate.notes)
    policy = _policy_info(gate)
    if not gate.moved:
        notes.append(f"no lock changed since {gate.ref} (merge base {gate.merge_base[:12]}): "
                     "nothing to check")
        # Nothing ran: lockguard's own values, not validated (as flows/check.py's shortcut).
        return Report.model_construct(command="check", mode="ab", notes=notes, passed=True,
                                      base=base, gate=policy,
                                      duration_s=time.perf_counter() - start)
    from lockguard.flows.ab import check_ab
    from lockguard.flows.report_parts import family_rule_report
    from lockguard.locks.parser import parse_lock_text
    from lockguard.locks.ref import LockRef, lock_for, lock_target

    candidates: list[LockRef] = []  # every lock on disk, in the judging order
    baseline: list[LockRef] = []  # every base lock paired with one
    moved: list[LockRef] = []  # candidates whose pins differ from their base's (or are new)
    paired: dict[int, LockRef] = {}  # id(candidate) -> its base lock
    # Each lock in its own format (a project may mix them), told by its file name at its side
    # (else its content), read for the platform the judging configuration builds for.
    target = lock_target(gate.judging)
    for pair in gate.pairs:
        if pair.head is None:
            notes.append(f"{display_path(pair.base)} was removed since {gate.ref}")
            continue
        new = LockRef(pair.head, parse_lock_text(pair.head_text or "", str(pair.head), target))
        candidates.append(new)
        if pair.base is None:
            notes.append(f"{display_path(pair.head)} is new since {gate.ref}: its scenarios "
                         "have no baseline")
            moved.append(new)
            continue
        where = f"{gate.ref}:{display_path(pair.base)}"
        old = LockRef(Path(where), parse_lock_text(pair.base_text or "", where, target,
                                                   name=pair.base.name),
                      label=gate.label(pair.base))  # errors name the ref
        baseline.append(old)
        paired[id(new)] = old
        if old.lock.lock_hash != new.lock.lock_hash:
            moved.append(new)
        elif pair.changed:
            notes.append(f"{display_path(pair.head)}: only comments or layout changed since "
                         f"{gate.ref}")
    def runs_from(s: Scenario, refs: list[LockRef]) -> LockRef | None:
        return lock_for(s, refs)

    def hash_of(ref: LockRef | None) -> str | None:
        return ref.lock.lock_hash if ref is not None else None

    # Only scenarios whose lock moved, where a check of the whole set runs them (the first lock
    # that pins their framework) against the base's (the same rule over the base's locks): the
    # rest cannot have changed. A framework moved into another lock is compared all the same.
    mine = [s for s in scenarios if runs_from(s, candidates) is not None
            and hash_of(runs_from(s, candidates)) != hash_of(runs_from(s, baseline))]
    judged = [ref for ref in moved if id(ref) in paired]  # moved locks the base's set names
    if not mine and not judged:
        if moved:
            notes.append(f"no selected scenario runs from a lock new since {gate.ref}")
        return Report(command="check", mode="ab", notes=notes, passed=True, base=base,
                      gate=policy, duration_s=time.perf_counter() - start)
    run_new = list({id(r): r for s in mine if (r := runs_from(s, candidates))}.values()) \
        or judged  # none: "nothing was compared", which fails (the locks moved)
    run_old = list({id(r): r for s in mine if (r := runs_from(s, baseline))}.values()) \
        or [paired[id(ref)] for ref in judged]
    report = (family_rule_report("check", moved)
              or check_ab(settings, run_new, run_old, mine, progress, backend))
    report.notes = notes + report.notes
    report.base = base
    report.gate = policy
    return report


def _policy_info(gate: Gate):
    from lockguard.report import GatePolicy

    config = gate.checkout.file
    return GatePolicy.model_construct(source=gate.policy_from, judged_by=gate.judged_by,
                                      changes=list(gate.changes),
                                      config=display_path(config) if config else None)


# ------------------------------------------------------------------------- the base's config

def _config_at(base: gitref.BaseTree, config: Config) -> tuple[Config | None, str | None]:
    """The configuration at the merge base, read where the checkout's lives (the same file
    first, then the other names in the order load_config looks for them); None when the base
    has no lockguard configuration there."""
    names = list(CONFIG_NAMES)
    if config.file is not None and config.file.name in names:
        names.remove(config.file.name)
        names.insert(0, config.file.name)
    for name in names:
        path = config.root / name
        text = base.text(path)
        if text is None:
            continue
        # Named as git names it, from the repository's root: main:ml/pyproject.toml.
        where = f"{short_ref(base.ref)}:{base.rel(path)}"
        section = lockguard_table(text, name, where)
        if section is None:
            continue
        source = where + (" [tool.lockguard]" if name == "pyproject.toml" else "")
        return parse_config(section, source, config.root, config.file or path), base.rel(path)
    return None, None


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


def _script_changes(base: gitref.BaseTree, base_config: Config | None,
                    head: Config) -> list[str]:
    """User scenario scripts this checkout changed: the check runs this checkout's."""
    out = []
    for name, scenario in sorted(head.scenario.items()):
        path = head.resolve(scenario.script)
        old = base.text(path) if base_config is not None and name in base_config.scenario \
            else None
        if old is None:
            continue
        if _normalise(old) != _normalise(gitref.disk_text(path)):
            out.append(f"scenario {name}: its script {display_path(path)} changed (the check "
                       "runs this checkout's)")
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
