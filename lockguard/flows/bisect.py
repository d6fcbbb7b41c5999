"""Culprit bisection: the smallest set of changed packages that reproduces a failing A/B verdict.

The changes between the baseline and the candidate lock are grouped into units (a framework
family moves as one: torch/torchvision/torchaudio/triton with the CUDA wheels they load, jax with
jaxlib and its plugins, tensorflow with keras and tf-*; any other package alone). A mix is the
baseline lock with some units taken from the candidate (their pins and hashes; added packages
added, removed ones removed). Each mix is first checked for consistency against the dependency
metadata of the two environments the check already built (every Requires-Dist of every pin must
be met by the mix's pins, as `pip check` would say after installing it), then built and run for
the failing scenario only, and judged against the baseline's run exactly as the A/B check judged
the candidate.

The search: a binary search over the units first (a single culprit is found in ⌈log2 n⌉ mixes
and confirmed with at most one more), then, when the halves disagree with a single culprit (two
packages needed together, a mix that cannot be resolved), Zeller's ddmin to a 1-minimal set,
every mix memoised. The empty mix is the baseline and the full mix the candidate: both are known
from the check, never rebuilt.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.cache import cache_dir, ensure_dir
from lockguard.compare.verdicts import compare_runs, is_failure
from lockguard.envs.installed import (
    distributions, python_version, requires, applies, marker_environment,
)
from lockguard.errors import LockguardError, one_line
from lockguard.files import display_path, write_text
from lockguard.flows.pipeline import Backend, Job, Planned, Runs, pipeline, run_backend
from lockguard.locks.diff import Change, LockDiff, diff_locks
from lockguard.locks.mix import mix_locks
from lockguard.locks.model import FRAMEWORK_DISTS, Lock
from lockguard.locks.parser import parse_lock
from lockguard.locks.ref import LockRef, Pairing, lock_for
from lockguard.locks.writer import InstallForm, write_lock
from lockguard.names import Verdict
from lockguard.progress import QUIET, Progress
from lockguard.report import Bisection, MixTrial
from lockguard.report._common import change_short, summary_line
from lockguard.scenarios import Scenario
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.envs.base import Env
    from lockguard.results import RunResult

Outcome = Literal["fail", "pass", "unresolved"]
Oracle = Callable[[frozenset[int]], Outcome]

_FRAMEWORK_FAMILIES = ("torch", "jax", "tensorflow")
# Model libraries in a framework's family that are released on their own schedule: Keras 3
# (tensorflow asks for keras>=3.x, not a version of its own). Bisection tries each as a unit of
# its own, so that a Keras release that moves the numbers is named as Keras, not as the
# tensorflow family. torchvision and torchaudio stay with torch: each release is built against
# one torch release (torchvision 0.29.0 requires torch==2.14.0), so a mix that moves one without
# the other is rarely installable, and a torch bump moves them along in every real lock.
_OWN_RELEASES = frozenset({"keras", "keras-nightly"})


# ----------------------------------------------------------------------------------- units

@dataclass(frozen=True)
class Unit:
    """Changes that move together: one framework family's, or one package's."""

    label: str  # "numpy", "torch family"
    changes: tuple[Change, ...]

    @property
    def texts(self) -> list[str]:
        """Its changes in a few words each ('numpy 1.26.4 → 2.0.2'), as trials and culprits
        list them."""
        return [change_short(c) for c in self.changes]


def change_units(diff: LockDiff) -> list[Unit]:
    """The diff's package changes grouped into units, in name order of their first package.

    A change belongs to the families package_families gives it; families a change shares are
    merged (ml-dtypes joins jax and tensorflow). CUDA wheels (nvidia-*) join every framework
    family that moved in this diff, since each of them loads them; alone they are one unit.
    numpy is a family of one package and stays a unit of its own, as do the libraries released
    on their own schedule (_OWN_RELEASES: keras) and every package outside the families
    (transformers, timm, flax, optax).
    """
    changed = diff.changed

    def families(c: Change) -> list[str]:
        if c.name in _OWN_RELEASES:
            return []
        return [f for f in c.families if f in _FRAMEWORK_FAMILIES]

    moved = {f for c in changed for f in families(c)}
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    keys: list[str] = []
    for c in changed:
        fams = families(c)
        if "cuda" in c.families:
            fams += sorted(moved) or ["cuda"]
        labels = [f"family:{f}" for f in fams] or [f"package:{c.name}|{c.marker or ''}"]
        for other in labels[1:]:
            parent[find(other)] = find(labels[0])
        keys.append(labels[0])
    groups: dict[str, list[Change]] = {}
    for key, c in zip(keys, changed, strict=True):
        groups.setdefault(find(key), []).append(c)
    units = []
    for root, members in groups.items():
        families = sorted({f.removeprefix("family:") for f in parent if find(f) == root
                           and f.startswith("family:")})
        # Named for the families a change of its own moved: ml-dtypes alone (jax's and
        # tensorflow's) makes the jax family's unit no "jax + tensorflow family".
        own = [f for f in families if any(c.families == (f,) for c in members)]
        families = own or families
        label = (" + ".join(f"{f} family" if f != "cuda" else "CUDA wheels" for f in families)
                 if families else members[0].display_name)
        units.append(Unit(label=label, changes=tuple(members)))
    return sorted(units, key=lambda u: u.changes[0].name)


# ------------------------------------------------------------------------------------ mixes

def mix_text(old: LockRef, new: LockRef, units: Iterable[Unit],
             changes: Sequence[Change] | None = None) -> tuple[InstallForm, str]:
    """The baseline lock with `units` taken from the candidate (locks.mix.mix_locks), or only
    `changes` of theirs (a repaired mix), written in the locks' install form (locks.writer):
    (form, text)."""
    chosen = list(units)
    mix = mix_locks(old.lock, new.lock, [c for unit in chosen for c in unit.changes]
                    if changes is None else changes)
    labels = ", ".join(u.label for u in chosen) or "nothing"
    return write_lock(mix, header=f"lockguard bisect: {old.name} with {labels} from {new.name}")


def write_mix(form: InstallForm, text: str) -> Path:
    """The path of a mix's lock in the cache (cache_dir()/bisect), named by a hash of `text`:
    the same mix is the same file, rewritten only when its text differs."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    # Named as its format is (a pylock.toml's name says it is one, to uv as to lockguard).
    name = f"pylock.{digest}.toml" if form == "pylock.toml" else f"{digest}.txt"
    path = ensure_dir(cache_dir() / "bisect") / name
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        write_text(path, text)
    return path


# ------------------------------------------------------------------------------ consistency

Requires = dict[tuple[str, str], tuple[str, ...]]  # (canonical name, version) -> Requires-Dist


def env_requires(env: Env) -> tuple[Requires, str | None] | None:
    """The Requires-Dist of every distribution installed in a venv-like environment, and its
    Python version (X.Y); None for an environment without a readable site-packages."""
    site = env.site_packages()
    if site is None:
        return None
    found: Requires = {}
    for name, (version, metadata) in distributions(site).items():
        try:
            found[(name, str(Version(version)))] = requires(metadata) or ()
        except InvalidVersion:
            continue  # not a version a pin can name
    return found, python_version(site)


@dataclass(frozen=True)
class Violation:
    """A pin of a mix whose requirement the mix's pin of the dependency does not meet."""

    pin: str  # the requiring pin's canonical name
    dep: str  # the dependency's canonical name
    requirement: str  # as its metadata writes it: "numpy>=2.0.0"
    message: str


def violations(mix: Lock, requires: Requires, python: str | None,
               known: set[str]) -> Iterable[Violation]:
    """Each way the mix cannot be installed as pinned: a pin whose dependency the mix pins at a
    version outside its requirement, or no longer pins at all (`known`: the names either lock
    pins; a dependency neither lock pins is outside this check)."""
    environment = marker_environment(python)
    pinned = {p.name: p for p in mix.pins}
    for pin in mix.pins:
        for spec in requires.get((pin.name, str(pin.parsed_version)), ()):
            req = Requirement(spec)
            if not applies(req, environment, pin.extras):
                continue
            dep = canonicalize_name(req.name)
            have = pinned.get(dep)
            if have is None:
                if dep in known:
                    yield Violation(pin.name, dep, str(req), f"{pin.requirement} requires "
                                    f"{req}, which the mix does not pin")
                continue
            if not req.specifier.contains(Version(have.version), prereleases=True):
                yield Violation(pin.name, dep, str(req), f"{pin.requirement} requires {req}; "
                                f"the mix pins {have.requirement}")


def inconsistency(mix: Lock, requires: Requires, python: str | None,
                  known: set[str]) -> str | None:
    """Why the mix cannot be installed as pinned (the first of its violations); None when
    consistent."""
    return next((v.message for v in violations(mix, requires, python, known)), None)


def repair(old: Lock, new: Lock, units: Sequence[Unit], requires: Requires,
           python: str | None, known: set[str]) -> tuple[list[Change], list[str]] | str:
    """The nearest consistent mix to the baseline with `units` from the candidate, within the
    two locks' own versions: (its changes, what was kept back and why); else why none is.

    A mix is repaired only by keeping some of the units' packages at the baseline's version
    (a family unit split into its members: ml-dtypes kept at 0.5.4 beside jax 0.5.0 when 0.7.0
    requires numpy 2), never by taking a change from outside `units`, which would make the
    mix test more than it is asked to. Kept back, first, the package whose requirement fails,
    else the dependency it requires (when its baseline version meets that); never a unit's
    last change, nor a framework's own package (torch, jax, tensorflow…)."""
    leads = {d for dists in FRAMEWORK_DISTS.values() for d in dists}
    chosen = {(c.name, c.marker): c for u in units for c in u.changes}
    unit_of = {(c.name, c.marker): u for u in units for c in u.changes}
    kept: list[str] = []
    for _ in range(len(chosen) + 1):
        mix = mix_locks(old, new, chosen.values())
        found = next(iter(violations(mix, requires, python, known)), None)
        if found is None:
            return list(chosen.values()), kept
        left = {u.label: sum(unit_of[k] is u for k in chosen) for u in units}

        def keepable(name: str) -> tuple[str, str | None] | None:
            key = next((k for k in chosen if k[0] == name), None)
            if key is None or name in leads or left[unit_of[key].label] <= 1:
                return None
            return key

        key = keepable(found.pin) or _meets_when_kept(keepable(found.dep), chosen, found)
        if key is None:
            return found.message
        change = chosen.pop(key)
        kept.append(f"{change.display_name} " + (f"kept at {change.old_version}"
                                                  if change.old_version else "left out")
                    + f" ({found.message})")
    return "no consistent mix found"


def _meets_when_kept(key: tuple[str, str | None] | None, chosen: dict, found: Violation
                     ) -> tuple[str, str | None] | None:
    """`key` when the dependency's baseline version meets the requirement that failed."""
    if key is None or chosen[key].old_version is None:
        return None
    ok = Requirement(found.requirement).specifier.contains(Version(chosen[key].old_version),
                                                            prereleases=True)
    return key if ok else None


# ------------------------------------------------------------------------- the search

def bisect_search(n: int, test: Oracle) -> tuple[frozenset[int], str]:
    """A 1-minimal set of unit indices for which `test` fails, assuming the full set fails and
    the empty set passes (never asked): a binary search for a single culprit, confirmed, else
    ddmin. Returns (culprit set, strategy)."""
    full = frozenset(range(n))
    memo: dict[frozenset[int], Outcome] = {frozenset(): "pass", full: "fail"}

    def ask(subset: frozenset[int]) -> Outcome:
        if subset not in memo:
            memo[subset] = test(subset)
        return memo[subset]

    candidates = list(range(n))
    single = True
    while len(candidates) > 1:
        half = frozenset(candidates[:len(candidates) // 2])
        outcome = ask(half)
        if outcome == "fail":
            candidates = sorted(half)
        elif outcome == "pass":
            candidates = candidates[len(candidates) // 2:]
        else:
            single = False
            break
    if single and ask(frozenset(candidates)) == "fail":
        return frozenset(candidates), "binary search"
    return ddmin(list(range(n)), ask), "ddmin"


def ddmin(items: list[int], test: Oracle) -> frozenset[int]:
    """Zeller and Hildebrandt's ddmin: a 1-minimal failing subset of `items` (which fails).
    An unresolved outcome counts as not failing."""
    current = list(items)
    n = 2
    while len(current) >= 2:
        chunks = [current[i * len(current) // n:(i + 1) * len(current) // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        reduced = False
        for chunk in chunks:
            if test(frozenset(chunk)) == "fail":
                current, n, reduced = chunk, 2, True
                break
        if not reduced and n > 2:  # with two chunks each complement is the other chunk
            for chunk in chunks:
                rest = [x for x in current if x not in chunk]
                if test(frozenset(rest)) == "fail":
                    current, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return frozenset(current)


# ------------------------------------------------------------------------- the flow

@dataclass
class _TimedBackend(Backend):
    """The flow's backend, timing each environment it prepares (seconds per lock hash); the
    rest of the Backend protocol is the inner one's."""

    inner: Backend
    seconds: dict[str, float] = field(default_factory=dict)

    def identity(self) -> str:
        return self.inner.identity()

    def admit(self, locks: Sequence[Lock]) -> None:
        self.inner.admit(locks)

    def scope(self, framework: str, device: str) -> str:
        return self.inner.scope(framework, device)

    def prepare(self, lock: Lock | None, framework: str, device: str,
                progress: Progress) -> Env:
        started = time.perf_counter()
        env = self.inner.prepare(lock, framework, device, progress)
        if lock is not None:
            key = lock.lock_hash
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - started
        return env


def bisect_scenario(settings: Settings, scenario: Scenario, old: LockRef,
                    new: LockRef, failing: ScenarioVerdict, baseline_runs: list[RunResult],
                    progress: Progress = QUIET,
                    backend: Backend | None = None) -> Bisection:
    """Find the smallest set of change units of old → new that reproduces `failing` (the A/B
    verdict of `scenario`), judging each mix against `baseline_runs` (the check's)."""
    diff = diff_locks(old.lock, new.lock)
    units = change_units(diff)
    n = len(units)
    bound = math.ceil(math.log2(n)) + 2 if n > 1 else 2
    result = Bisection(scenario=scenario.id, framework=scenario.framework,
                       verdict=failing.verdict.value, baseline_lock=old.name,
                       candidate_lock=new.name, units=[u.label for u in units], bound=bound)
    if diff.option_changes:
        result.notes.append("installer options changed too; every mix uses both locks' "
                            "options, so options are not bisected")
    if n == 0:
        result.notes.append("no package changed: nothing to bisect")
        return result
    if settings.local:
        result.notes.append("--env local runs the installed packages, not a lock: "
                            "nothing to bisect")
        return result
    # The mixes compile warm from one another's caches: a bisection names a culprit, it
    # passes no gate, and every mix is made of the two sides' own pins.
    timed = _TimedBackend(run_backend(settings, backend, share_compile_caches=True))
    requires, python = _installed_requires(
        timed, (old, new), scenario.framework,
        failing.expected_device or settings.report_device, progress)
    if not requires:
        result.notes.append("mixes not checked for consistency: the environments expose no "
                            "installed metadata (not a venv)")
    timed.seconds.clear()  # from here on, only the mixes' builds
    mixes = _Mixes(settings=settings.single(), scenario=scenario, old=old, new=new,
                   failing=failing, baseline_runs=baseline_runs, units=units, result=result,
                   backend=timed, requires=requires, python=python, progress=progress)
    progress.info(f"Bisecting {scenario.id} ({failing.verdict.value}) over {n} change "
                  f"unit(s): {', '.join(u.label for u in units)}")
    if n == 1:
        culprit, strategy = frozenset({0}), "one unit"
    else:
        culprit, strategy = bisect_search(n, mixes)
    _conclude(result, units, culprit, strategy)
    _sureness(result, units, culprit, mixes)
    rest = sorted(frozenset(range(n)) - culprit)
    if mixes.asked.get(frozenset(rest)) == "fail" and len(rest) > 1:
        # Every other change reproduces the failure too: another culprit, searched among them
        # (each mix of theirs is a mix of the whole: asked once, built once).
        again, _ = bisect_search(len(rest), lambda sub: mixes(frozenset(rest[i] for i in sub)))
        result.also = [t for i in sorted(again) for t in units[rest[i]].texts]
    elif mixes.asked.get(frozenset(rest)) == "fail":
        result.also = [t for i in rest for t in units[i].texts]
    # Every mix built, the confirmations and a second culprit's search included.
    result.builds = len({t.lock_hash for t in result.trials if t.status != "inconsistent"})
    return result


def _sureness(result: Bisection, units: list[Unit], culprit: frozenset[int],
              mixes: _Mixes) -> None:
    """How sure the answer is (result.confidence, and why): isolated when the culprit set
    alone reproduces the failure and the mix of every other change (asked here when the search
    did not) reproduces the baseline; implicated when it cannot be separated from the others
    or its units from one another (which constraint), or the others reproduce the failure too;
    suspected when no mix of it could be run."""
    full = frozenset(range(len(units)))
    known: dict[frozenset[int], Outcome] = {frozenset(): "pass", full: "fail", **mixes.asked}
    reasons = [t.reason.removeprefix("inconsistent: ") for t in result.trials
               if t.status == "inconsistent" and t.reason
               and set(t.units) & set(result.culprit_units)]
    if known.get(culprit) != "fail":
        result.found = False
        result.confidence = "implicated" if reasons else "suspected"
        result.sureness = (f"it cannot be run apart from the other changes: {reasons[0]}"
                           if reasons else "no mix of these alone could be run")
        return
    rest = full - culprit
    without = known[rest] if rest in known else mixes(rest)
    if len(culprit) > 1 and reasons:
        result.confidence = "implicated"
        result.sureness = f"they cannot be run apart: {reasons[0]}"
        return
    if without == "pass":
        result.confidence = "isolated"
        result.sureness = ("with these alone the failure reproduces; with every other change "
                           "and not these, the baseline")
        return
    result.confidence = "implicated"
    result.sureness = ("the other changes reproduce the failure too: another culprit among them"
                       if without == "fail" else "a mix without them could not be run"
                       + (f": {reasons[0]}" if reasons else ""))


def _installed_requires(backend: Backend, refs: Sequence[LockRef], framework: str, device: str,
                        progress: Progress) -> tuple[Requires, str | None]:
    """The installed metadata of the environments of `refs` (the check built them: preparing
    them again is a cache hit), what a mix is checked against before it is built; empty when
    none exposes any. The Python version is the last one's that does."""
    requires: Requires = {}
    python = None
    for ref in refs:
        got = env_requires(backend.prepare(ref.lock, framework, device, progress))
        if got is not None:
            requires.update(got[0])
            python = got[1]
    return requires, python


@dataclass
class _Mixes:
    """The search's oracle for one bisection: a subset of `units` as a mix lock (the baseline
    with those units from the candidate), checked for consistency against `requires`, then
    built, run once and judged as the check judged the candidate. Every mix asked is a trial
    in `result`."""

    settings: Settings  # a mix runs once: settings.single()
    scenario: Scenario
    old: LockRef
    new: LockRef
    failing: ScenarioVerdict
    baseline_runs: list[RunResult]
    units: list[Unit]
    result: Bisection
    backend: _TimedBackend
    requires: Requires
    python: str | None
    progress: Progress
    known: set[str] = field(init=False)  # the names either lock pins
    together: bool = field(init=False)
    asked: dict[frozenset[int], Outcome] = field(default_factory=dict)  # each mix once

    def __post_init__(self) -> None:
        self.known = set(self.old.lock.by_name) | set(self.new.lock.by_name)
        # Timings and memory peaks only mean something measured side by side.
        self.together = self.failing.verdict in (Verdict.slower, Verdict.heavier)

    def __call__(self, subset: frozenset[int]) -> Outcome:
        if subset not in self.asked:
            self.asked[subset] = self._ask(subset)
        return self.asked[subset]

    def _ask(self, subset: frozenset[int]) -> Outcome:
        chosen = [self.units[i] for i in sorted(subset)]
        path = write_mix(*mix_text(self.old, self.new, chosen))
        mix = parse_lock(path)
        names = [u.label for u in chosen]
        changes = [t for u in chosen for t in u.texts]
        trial = MixTrial(units=names, changes=changes, lock=display_path(path),
                         lock_hash=mix.lock_hash, status="inconsistent")
        self.result.trials.append(trial)
        why = (inconsistency(mix, self.requires, self.python, self.known)
               if self.requires else None)
        if why is not None:
            # The nearest consistent mix within the two locks, a family split if need be.
            repaired = repair(self.old.lock, self.new.lock, chosen, self.requires, self.python,
                              self.known)
            if isinstance(repaired, str):
                trial.reason = f"inconsistent: {repaired}"
                self.progress.info(f"  bisect {self.scenario.id}: skipped mix "
                                   f"{' + '.join(names)} ({trial.reason})")
                return "unresolved"
            taken, trial.kept = repaired
            path = write_mix(*mix_text(self.old, self.new, chosen, taken))
            mix = parse_lock(path)
            trial.lock, trial.lock_hash = display_path(path), mix.lock_hash
            trial.changes = [change_short(c) for c in taken]
        # Named for people by what it takes from the candidate: "baseline + jinja2 3.1.5".
        ref = LockRef(path, mix, device=self.new.device,
                      label=f"mix: baseline + {', '.join(changes) or 'nothing'}")
        return self._run(ref, trial)

    def _run(self, ref: LockRef, trial: MixTrial) -> Outcome:
        """Build and run the mix `ref`, judge it and say what `trial` showed: "fail" when it
        reproduces the failing verdict, "pass" when it passes the policy, else "unresolved"."""
        policy, together = self.settings.policy, self.together

        def decide(p: Planned) -> list[Job]:
            return ([Job(p, self.old, "baseline")] if together else []) + [
                Job(p, ref, "candidate")]

        def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, None]:
            return compare_runs(runs.baseline if together else self.baseline_runs,
                                runs.candidate, policy=policy, baseline_kind="lock",
                                expected_device=p.device, timed_together=together,
                                tolerance=p.scenario.tolerance), None

        started = time.perf_counter()
        try:
            outcome = pipeline(self.settings, [self.scenario], [ref], decide=decide,
                               judge=judge, progress=self.progress, backend=self.backend)
        except LockguardError as exc:
            trial.status, trial.reason = "broken", one_line(str(exc))
            trial.build_s = round(self.backend.seconds.get(ref.lock.lock_hash, 0.0), 2)
            return "unresolved"
        trial.build_s = round(self.backend.seconds.get(ref.lock.lock_hash, 0.0), 2)
        trial.run_s = round(time.perf_counter() - started - trial.build_s, 2)
        [verdict] = outcome.verdicts
        trial.verdict = verdict.verdict.value
        trial.reason = summary_line(verdict) or None
        if verdict.verdict == self.failing.verdict:
            trial.status = "reproduces"
            return "fail"
        if not is_failure(verdict, policy):
            trial.status = "baseline"
            return "pass"
        trial.status = "broken" if verdict.verdict == Verdict.broken else "differs"
        return "unresolved"


def _conclude(result: Bisection, units: list[Unit], culprit: frozenset[int],
              strategy: str) -> None:
    """Fill `result` with what the search found: the culprit's units, changes and candidate
    lock lines, and whether the culprit set itself reproduced."""
    n = len(units)
    result.strategy = strategy
    result.culprit = [t for i in sorted(culprit) for t in units[i].texts]
    result.culprit_units = [units[i].label for i in sorted(culprit)]
    # Lines of the candidate lock (what annotations point at); a removed package has none.
    result.culprit_lines = [c.new_line for i in sorted(culprit) for c in units[i].changes
                            if c.new_line]
    result.others = sum(len(u.changes) for i, u in enumerate(units) if i not in culprit)
    # Confirmed: the set itself reproduced (or is the whole diff, which the check ran).
    confirming = [t for t in result.trials if t.status == "reproduces"
                  and sorted(t.units) == sorted(result.culprit_units)]
    result.found = len(culprit) == n or bool(confirming)
    if confirming and confirming[0].kept:
        # A repaired mix reproduced it without the packages it kept back: those are not named.
        taken = [c for i in sorted(culprit) for c in units[i].changes
                 if change_short(c) in confirming[0].changes]
        result.culprit = [change_short(c) for c in taken]
        result.culprit_lines = [c.new_line for c in taken if c.new_line]
        result.others += sum(len(units[i].changes) for i in culprit) - len(taken)
        result.notes += [f"not named: {k}" for k in confirming[0].kept]


def attach_bisection(report: Report, settings: Settings, scenarios: list[Scenario],
                     candidates: list[LockRef], pairing: Pairing,
                     progress: Progress = QUIET, backend: Backend | None = None) -> Report:
    """Bisect every failing scenario of an A/B report (each between the locks the A/B compared
    it across: `pairing`); the report with `bisection` filled."""
    by_id = {s.id: s for s in scenarios}
    found, notes = [], []
    for verdict in report.verdicts:
        if not report.fails(verdict) or verdict.scenario not in by_id:
            continue
        if verdict.nondeterministic or verdict.envelope is not None:
            # A mix runs once and is judged against one baseline run: for a noisy scenario
            # every mix would look like the failure, and the search would name a wrong unit.
            notes.append(f"{verdict.scenario} not bisected: its runs are nondeterministic, and "
                         "bisection compares single runs")
            continue
        sc = by_id[verdict.scenario]
        new = lock_for(sc, candidates)
        old = pairing.of(sc, new)
        ev = report.evidence_of(sc.id)
        if old is None or new is None or ev is None or ev.baseline is None:
            continue
        found.append(bisect_scenario(settings, sc, old, new, verdict, [ev.baseline.result],
                                     progress, backend))
    return report.model_copy(update={"bisection": found, "notes": report.notes + notes})


if TYPE_CHECKING:
    from lockguard.report import Report
