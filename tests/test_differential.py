"""The golden check's shortcut against a cold run, over random project mutations (issue 43).

`check` answers a scenario from its golden's provenance (`unchanged`, nothing run) while its
inputs digest holds. A random walk mutates what a run depends on (the lock, the scenario's
script, a helper module and a data file beside it, the steps, the harness code) and after every
step asks both: the check with the shortcut, and the same check with it off (`--rerun`).
Whenever the shortcut answers, the cold run must find the golden still true (identical); where
it does not answer, both must agree. The fake backend's runs move with exactly those inputs
(its results are salted with every file beside a script), so a shortcut that misses one of them
shows here as an `unchanged` the cold run contradicts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fakes import FakeBackend, lock
from lockguard.config import Config, Options
from lockguard.flows import goldens
from lockguard.flows.check import check
from lockguard.flows.record import record
from lockguard.names import Verdict
from lockguard.scenarios import all_scenarios
from lockguard.settings import Settings

SCRIPT = "import helper\n\n\ndef run(steps, seed):\n    return [helper.SCALE * 1.0] * steps\n"
MUTATIONS = ("lock", "script", "helper", "data", "steps", "harness")


def project(root: Path, steps: int) -> Config:
    config = Config(root=root, golden_dir="golden", steps=steps,
                    scenario={"mine": {"script": "sc/mine.py", "framework": "numpy"}})
    return config


def mutate(what: str, root: Path, state: dict, rng: random.Random) -> None:
    """Change one input of the runs, as a user (or an upgrade) would."""
    n = rng.randrange(1_000_000)
    if what == "lock":
        state["numpy"] = "2.0.2" if state["numpy"] == "1.26.4" else "1.26.4"
    elif what == "script":
        (root / "sc" / "mine.py").write_text(SCRIPT + f"# edit {n}\n")
    elif what == "helper":
        (root / "sc" / "helper.py").write_text(f"SCALE = {n % 7 + 1}\n")
    elif what == "data":
        (root / "sc" / "table.json").write_text(f'{{"rows": {n}}}\n')
    elif what == "steps":
        state["steps"] = 4 if state["steps"] == 5 else 5
    elif what == "harness":
        state["harness"] = f"harness-{n}"


@pytest.mark.parametrize("seed", range(3))
def test_the_golden_shortcut_answers_only_what_a_cold_run_confirms(tmp_path, monkeypatch, seed):
    rng = random.Random(20261205 + seed)
    root = tmp_path
    (root / "sc").mkdir()
    (root / "sc" / "mine.py").write_text(SCRIPT)
    (root / "sc" / "helper.py").write_text("SCALE = 1\n")
    (root / "sc" / "table.json").write_text('{"rows": 0}\n')
    state = {"numpy": "1.26.4", "steps": 4, "harness": "harness-0"}
    # The harness's code is part of a golden's inputs: a changed harness is another digest.
    monkeypatch.setattr(goldens, "harness_digest", lambda scenario: state["harness"])

    def now() -> tuple[Settings, list, list]:
        config = project(root, state["steps"])
        ref = lock(root, "lock.txt", f"numpy=={state['numpy']}\n")
        return Settings.resolve(config), [ref], all_scenarios(config)

    settings, refs, scenarios = now()
    assert record(settings, refs, scenarios, backend=FakeBackend()).passed
    answered = 0
    for step in range(24):
        what = rng.choice(MUTATIONS)
        mutate(what, root, state, rng)
        settings, refs, scenarios = now()
        fast = check(settings, refs, scenarios, backend=FakeBackend())
        cold = check(Settings.resolve(settings.config, Options(rerun=True)), refs, scenarios,
                     backend=FakeBackend())
        quick = {v.scenario: v.verdict for v in fast.verdicts}
        truth = {v.scenario: v.verdict for v in cold.verdicts}
        for sid, verdict in quick.items():
            if verdict == Verdict.unchanged:
                answered += 1
                assert truth[sid] == Verdict.identical, (step, what, sid, state)
            else:
                assert verdict == truth[sid], (step, sid, state, quick, truth)
        if not cold.passed:  # the walk goes on from goldens of what now runs
            assert record(settings, refs, scenarios, backend=FakeBackend()).passed
    assert answered, "the shortcut never answered: the walk tested nothing"
