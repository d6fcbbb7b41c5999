"""`lockguard check`: the candidate locks against stored goldens, or against baseline locks (A/B).

The golden check answers from provenance when nothing that shapes a run changed since its golden
was recorded on this hardware class: no framework is imported, nothing is built or run.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from lockguard import golden
from lockguard.config import Config, Options
from lockguard.flows.goldens import (
    Crossings, Hosts, compare_with_goldens, digest, golden_dir, load_goldens, unchanged,
)
from lockguard.flows.pipeline import Backend, Job, Planned, Runs, env_kind, pipeline, run_backend
from lockguard.locks.ref import LockRef
from lockguard.flows.report_parts import family_rule_report, lock_info, nothing_done, parity, \
    policy_for, trust_notes
from lockguard.golden import Golden, GoldenError, golden_path, legacy_path
from lockguard.hardware import HardwareClass
from lockguard.progress import QUIET, Progress
from lockguard.scenarios import Scenario, harness_digest

if TYPE_CHECKING:
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.report import Evidence, Report


def check(config: Config, locks: list[LockRef], scenarios: list[Scenario], opts: Options,
          baseline: list[LockRef] | None = None, progress: Progress = QUIET,
          backend: Backend | None = None) -> Report:
    # Only the locks under check: a baseline that broke a rule is what is being replaced.
    if (failed := family_rule_report("check", locks)) is not None:
        return failed
    if baseline:
        from lockguard.flows.ab import check_ab

        return check_ab(config, locks, baseline, scenarios, opts, progress, backend)
    return check_golden(config, locks, scenarios, opts, progress, backend)


def check_golden(config: Config, locks: list[LockRef], scenarios: list[Scenario],
                 opts: Options, progress: Progress = QUIET,
                 backend: Backend | None = None) -> Report:
    start = time.perf_counter()
    kind, backend = env_kind(config, opts), run_backend(config, opts, backend)
    gdir = golden_dir(config)
    harness = harness_digest()
    hosts, crossed = Hosts(), Crossings()
    policy = policy_for(config, opts.exact)
    answered: dict[str, HardwareClass] = {}  # scenario -> class whose golden answers unrun
    goldens: dict[str, tuple[dict[str, Golden], str]] = {}

    def decide(p: Planned) -> list[Job]:
        sid, host, inputs = p.scenario.id, hosts.get(p.device), digest(p, config, harness, backend)
        mine = golden_path(gdir, p.device, host.id, sid) if host is not None else None
        # Every golden read here is verified (digest, shape, class): a bad one is an error
        # before anything runs.
        mine_gold = golden.load(mine) if mine is not None else None
        # `local` runs whatever is installed, which the lock does not pin: never answered
        # from provenance.
        if mine_gold is not None and host is not None and not opts.rerun \
                and opts.repeat == 1 and kind != "local" and unchanged(mine_gold, p, inputs):
            # Same lock, harness, scenario and settings as when recorded, on this hardware
            # class: the answer is known without importing a framework or building anything.
            answered[sid] = host
            return []
        found = ({host.id: mine_gold} if mine_gold is not None and host is not None
                 else load_goldens(gdir, p))
        if not found:
            legacy = legacy_path(gdir, p.device, sid)
            if os.path.lexists(legacy):
                raise GoldenError(f"{legacy}: golden of schema 1 (recorded without a hardware "
                                  f"class); re-record it (`lockguard record --scenario {sid}`)")
            if not opts.allow_new:
                where = mine or golden_path(gdir, p.device, "<hardware class>", sid)
                raise GoldenError(f"{where}: no golden recorded for scenario {sid} on any "
                                  f"hardware (run `lockguard record --scenario {sid}` first)")
        goldens[sid] = (found, inputs)
        return [Job(p, p.lock)] * opts.repeat

    def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, Evidence | None]:
        from lockguard.compare.verdicts import ScenarioVerdict
        from lockguard.names import Verdict

        sid = p.scenario.id
        if sid in answered:
            # Made of lockguard's own values: nothing to validate (see `assemble` below).
            return ScenarioVerdict.model_construct(
                scenario=sid, framework=p.scenario.framework, verdict=Verdict.identical,
                baseline_kind="golden",
                reasons=["lock and scenario unchanged since the golden was recorded on this "
                         f"hardware class ({answered[sid].id}); not re-run "
                         "(--rerun runs it)"]), None
        found, inputs = goldens[sid]
        return compare_with_goldens(p, runs.candidate, found, hosts.get(p.device), inputs,
                                    policy, crossed)

    outcome = pipeline(config, opts, scenarios, locks, decide=decide, judge=judge,
                       progress=progress, backend=backend)
    from lockguard.compare.verdicts import gate_passes, is_failure
    from lockguard.report import Report

    idle = nothing_done(outcome.verdicts, "compared")
    # A check answered wholly from provenance ran nothing, and its report holds only values
    # lockguard made itself: it skips the Report validator, whose one-off build (every nested
    # model, RunResults included) would be a fifth of the unchanged-lock answer. Rendering it
    # as JSON still goes through the model's serializer.
    ran_nothing = bool(answered) and set(answered) == {v.scenario for v in outcome.verdicts}
    assemble = Report.model_construct if ran_nothing else Report
    return assemble(command="check", mode="golden", device=opts.device or config.device,
                  locks=[lock_info(r, "candidate") for r in locks], verdicts=outcome.verdicts,
                  evidence=outcome.evidence,
                  parity=parity({p.scenario.id: p.scenario for p in outcome.planned},
                                outcome.results),
                  notes=([idle] if idle else []) + crossed.notes()
                  + trust_notes(config, locks),
                  hardware=hosts.known(),
                  passed=gate_passes(outcome.verdicts, policy) and not idle,
                  failing=[v.scenario for v in outcome.verdicts if is_failure(v, policy)],
                  duration_s=time.perf_counter() - start)
