"""`lockguard init`: add lockguard to a project. A project wizard beside the flows, not one of
them: it runs no pipeline of its own, and uses the flows (the plan, record), the config, the
locks and the scenarios; only the command line imports it (tests/test_layers.py).

Three stages, so that the command line can ask its questions in between and nothing is written
before every check has passed:

    project.py    survey(project) -> Survey: what the project holds (its locks, the files
                  passed over and why, an existing config, its package, the repository and a
                  workflow that already runs lockguard); describe, config_place
    plan.py       prepare(survey, Choices) -> Plan: what would be written and recorded, every
                  piece validated; nothing written
    writing.py    apply(plan) -> Done: the files written (each atomically), the missing goldens
                  recorded through the record flow, and the next steps (cost_lines: what a
                  lock pull request will cost here)
    templates.py  the texts: the GitHub workflow that uses the action, and the scenario
                  template that trains the team's own model

An existing config is never touched; an existing workflow or template file neither.
"""

from lockguard.init.plan import Choices, Plan, prepare
from lockguard.init.project import Survey, config_place, describe, survey
from lockguard.init.writing import Done, apply, cost_lines

__all__ = ["Choices", "Done", "Plan", "Survey", "apply", "config_place", "cost_lines",
           "describe", "prepare", "survey"]
