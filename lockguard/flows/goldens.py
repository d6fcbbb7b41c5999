"""What record and the golden check share: this machine's hardware classes, the inputs digest a
golden is recorded from, and comparing runs with the golden of their own (or another) class."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lockguard import golden
from lockguard.compare.verdicts import compare_runs, HardwareChange
from lockguard.files import display_path
from lockguard.flows.pipeline import Planned
from lockguard.flows.report_parts import evidence
from lockguard.golden import Golden, GoldenError, class_paths
from lockguard.hardware import HardwareClass, difference, hardware_class, host_class
from lockguard.results import RunResult
from lockguard.scenarios import harness_digest, inputs_digest
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.compare.tolerance import Policy
    from lockguard.envs import Backend
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.names import Verdict
    from lockguard.report import Evidence


class Hosts:
    """This machine's hardware class per device, read once (None where it cannot be read
    cheaply: a TPU, a GPU whose driver /proc/driver/nvidia does not show)."""

    def __init__(self) -> None:
        self._known: dict[str, HardwareClass | None] = {}

    def get(self, device: str) -> HardwareClass | None:
        """This machine's class for `device`, read on first asking; None when it cannot be
        read."""
        if device not in self._known:
            self._known[device] = host_class(device)
        return self._known[device]

    def known(self) -> dict[str, HardwareClass]:
        """For Report.hardware: the classes that could be read."""
        return {d: c for d, c in self._known.items() if c is not None}


class Crossings:
    """Scenarios compared with another hardware class's golden, grouped for one note each."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list[str]] = {}

    def add(self, change: HardwareChange, scenario: str) -> None:
        """Count `scenario` as compared across `change` (golden's class → this machine's)."""
        self._seen.setdefault((change.golden, change.current), []).append(scenario)

    def notes(self) -> list[str]:
        """One report note per pair of classes crossed, naming its scenarios and how to record
        goldens for this machine; in the order first seen."""
        return [f"goldens of {', '.join(sids)} were recorded on {old}; this machine is {new}: "
                "`lockguard record` adds goldens for this hardware class beside them"
                for (old, new), sids in self._seen.items()]


def lock_hash(p: Planned) -> str:
    """The hash of the lock `p` runs from ("local": the interpreter as it is)."""
    return p.lock.lock.lock_hash if p.lock else "local"


def lock_name(p: Planned) -> str:
    """The lock `p` runs from, as people name it."""
    return p.lock.name if p.lock else "local"


def digest(p: Planned, settings: Settings, backend: Backend) -> str:
    """The inputs digest of `p`'s runs on `backend`: what a golden is recorded from, and
    answers for unrun while it is unchanged."""
    return inputs_digest(p.scenario, lock_hash=lock_hash(p), steps=p.steps, seed=settings.seed,
                         device=p.device, threads=settings.threads,
                         harness=harness_digest(p.scenario),
                         environment=environment(backend))


def environment(backend: Backend) -> str:
    """The backend and interpreter a run's environment is built with: the part of the inputs a
    lock hash does not say (Backend.identity)."""
    return backend.identity()


def unchanged(gold: Golden, p: Planned, digest: str) -> bool:
    """Whether a verified golden of this machine's class answers for `p` without a run."""
    result = gold.result
    return (golden.trusted(gold) and gold.provenance.inputs_digest == digest
            and result.scenario == p.scenario.id
            and result.steps == p.steps and result.device == p.device)


def load_goldens(gdir: Path, p: Planned) -> dict[str, Golden]:
    """Every hardware class's golden of `p`, each verified."""
    out = {}
    for path in class_paths(gdir, p.device, p.scenario.id):
        gold = golden.load(path)
        if gold is not None:
            out[gold.hardware.id] = gold
    return out


def previous_goldens(gdir: Path, p: Planned, host: HardwareClass | None,
                     notes: list[str]) -> dict[str, Golden]:
    """What `record` compares a new run with: every readable golden of `p`. An unusable one is
    set aside with a note; this class's is then replaced, another class's is left alone."""
    out = {}
    for path in class_paths(gdir, p.device, p.scenario.id):
        try:
            gold = golden.load(path)
        except GoldenError as exc:
            mine = host is not None and path.parent.name == host.id
            notes.append(("replacing " if mine else "ignoring another hardware class's ")
                         + f"unusable golden: {exc}")
            continue
        if gold is not None:
            out[gold.hardware.id] = gold
    return out


def compare_with_goldens(p: Planned, runs: list[RunResult], goldens: dict[str, Golden],
                         host: HardwareClass | None, digest: str, policy: Policy,
                         crossed: Crossings, alone: tuple[Verdict, str] | None = None
                         ) -> tuple[ScenarioVerdict, Evidence]:
    """The verdict of `runs` against the golden of their own hardware class, or, when there is
    none, against another class's golden, with the hardware change for compare_runs to judge."""
    here = (hardware_class(runs[0].fingerprint, p.device, runs[0].device_name)
            if runs[0].fingerprint else host)
    gold = goldens.get(here.id) if here is not None else None
    change: HardwareChange | None = None
    if gold is None and goldens:
        gold = _closest(list(goldens.values()), here, digest)
        change = _change(gold, here, digest, lock_hash(p))
        crossed.add(change, p.scenario.id)
    verdict = compare_runs([gold.result] if gold else [], runs, policy=policy,
                           baseline_kind="golden", expected_device=p.device,
                           timed_together=False, tolerance=p.scenario.tolerance,
                           hardware=change, envelope=gold.envelope if gold else None,
                           **({"alone": alone} if alone is not None else {}))
    baseline = (("golden", f"{display_path(gold.path)} ({gold.hardware.id})", gold.result)
                if gold is not None else None)
    return verdict, evidence(p.scenario.id, baseline, ("lock", lock_name(p), runs[0]), digest)


def _closest(goldens: list[Golden], here: HardwareClass | None, digest: str) -> Golden:
    """The other class's golden that says most: recorded from the same inputs, on the same CPU
    vendor, most recently (then by class id, so the choice is stable)."""
    vendor = here.id.split("-", 1)[0] if here is not None else None
    ordered = sorted(goldens, key=lambda g: g.hardware.id)
    ordered.sort(key=lambda g: g.provenance.recorded_at or "", reverse=True)
    ordered.sort(key=lambda g: (g.provenance.inputs_digest != digest,
                                g.hardware.id.split("-", 1)[0] != vendor))
    return ordered[0]


def _change(gold: Golden, here: HardwareClass | None, digest: str,
            lock_hash: str) -> HardwareChange:
    return HardwareChange(
        golden=gold.hardware.describe(),
        current=here.describe() if here is not None else "this machine (hardware class unknown)",
        same_inputs=gold.provenance.inputs_digest == digest,
        lock_changed=gold.provenance.lock_hash != lock_hash,
        detail=difference(gold.hardware, here) if here is not None else None)
