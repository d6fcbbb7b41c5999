"""The settings of one invocation, resolved once at the edge: the project's configuration
(config.Config) with what the command line gives (config.Options), each value decided here.

A command resolves its `Settings` from the two and hands them down; the flows, the pipeline,
the plan and the inputs digest read a setting from them and never from the config or the
options again, so a parameter such as `--env` or `tolerance` walks from the command line down
without climbing back. The project itself (its root and file, scenario tables, lock entries,
runners) stays reachable as `settings.config`, for what is not a setting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from lockguard import envvars
from lockguard.compare.tolerance import DEFAULT_FAIL_ON, Policy
from lockguard.config import Config, Options, tolerance_value
from lockguard.names import Verdict


@dataclass(frozen=True)
class Settings:
    """What one invocation runs with (frozen: built once by `resolve`)."""

    config: Config  # the project: root, file, scenario tables, lock entries, runners
    env: str  # the environment backend (names.ENV_KINDS): --env, else the config's
    # --device: every scenario is expected there. None: a scenario's own, else its lock's, else
    # default_device.
    device: str | None
    default_device: str  # the config's `device`
    steps: int | None  # --steps, else the config's; None: each scenario's own
    repeat: int  # runs per scenario (a side, in A/B)
    seed: int
    threads: int
    timeout: float  # seconds a run may take
    memory_limit: int | str  # bytes, "auto" or "none" (pipeline.memory_limit reads the host)
    cache_max_size: int | None  # bytes the cache is pruned to after a check or record
    python: str | None  # the interpreter venvs are built with and local runs use; None: ours
    installer: str  # uv or pip
    sandbox: str  # auto | required | off: LOCKGUARD_SANDBOX (--sandbox), else the config's
    allow_sdist: bool
    allow_unhashed: bool
    allow_insecure_index: bool
    share_bytecode: bool  # venvs link the .pyc lockguard compiled for the same bytes
    policy: Policy  # the gate: fail_on, the tolerance (normalised), --exact, the thresholds
    rerun: bool  # run even when the inputs are unchanged since the golden
    allow_new: bool  # a scenario without a golden is `new`, not an error
    bisect: bool  # A/B: find the changes behind each failing verdict
    timing: bool  # A/B: make the timing runs, `slower` in fail_on or not
    timing_runs: int  # timing runs a side, when made
    # A/B: leave out what the change cannot reach (Scenario.unreached): the config's
    # skip_unreached unless --all-scenarios.
    skip_unreached: bool
    golden_dir: Path  # resolved against the config's folder
    # A/B: which scenarios are re-run to find where their difference starts (compare/locate.py):
    # "drift" (the default: a drift verdict), "always" (--locate: any difference), "never".
    locate: str = "drift"

    @classmethod
    def resolve(cls, config: Config, options: Options | None = None) -> Settings:
        """The settings of `config` under `options` (none: the config's own)."""
        given = options if options is not None else Options()
        return cls(
            config=config, env=given.env or config.env, device=given.device,
            default_device=config.device, steps=given.steps or config.steps,
            repeat=given.repeat, seed=config.seed, threads=config.threads,
            timeout=config.timeout, memory_limit=config.memory_limit,
            cache_max_size=config.cache_max_size,
            python=config.python_path, installer=config.installer,
            sandbox=envvars.value("LOCKGUARD_SANDBOX") or config.sandbox,
            allow_sdist=config.allow_sdist, allow_unhashed=config.allow_unhashed,
            allow_insecure_index=config.allow_insecure_index,
            share_bytecode=config.share_bytecode, policy=_policy(config, given.exact),
            rerun=given.rerun,
            allow_new=given.allow_new, bisect=given.bisect, timing=given.timing,
            timing_runs=config.timing_runs,
            skip_unreached=config.skip_unreached and not given.all_scenarios,
            golden_dir=config.resolve(config.golden_dir),
            locate={None: "drift", True: "always", False: "never"}[given.locate])

    @property
    def report_device(self) -> str:
        """The device a report is headed with: --device, else the config's."""
        return self.device or self.default_device

    @property
    def local(self) -> bool:
        """Whether runs use the interpreter as it is (`--env local`), whatever a lock pins."""
        return self.env == "local"

    def single(self) -> Settings:
        """These settings with each scenario run once (a bisection's mix): repeat 1."""
        return replace(self, repeat=1)


def _policy(config: Config, exact: bool) -> Policy:
    """The gate policy `config` sets (`exact`: --exact as well); the config's `tolerance`
    normalised ("exact" is an exact Tolerance)."""
    fail_on = (frozenset(Verdict(v) for v in config.fail_on) if config.fail_on is not None
               else DEFAULT_FAIL_ON)
    return Policy(exact=exact or config.tolerance == "exact",
                  tolerance=tolerance_value(config.tolerance), fail_on=fail_on,
                  slower_ratio=config.slower_ratio, slower_min_step_s=config.slower_min_step_s,
                  heavier_ratio=config.heavier_ratio, heavier_min_bytes=config.heavier_min_bytes,
                  fail_on_improvement=config.fail_on_improvement)
