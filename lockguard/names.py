"""The names lockguard's layers share, each list defined once: frameworks, devices, environment
backends, report formats and verdicts, and the command line's bounds. (The harness keeps its
own copy: it imports nothing of lockguard.)"""

from enum import Enum

FRAMEWORKS = ("torch", "jax", "tensorflow", "numpy")
DEVICES = ("cpu", "cuda", "tpu")
ENV_KINDS = ("venv", "docker", "local")
SANDBOX_MODES = ("auto", "required", "off")  # what lock code runs in (lockguard/sandbox.py)
FORMATS = ("text", "json", "markdown", "html", "junit", "github")
RESOLVERS = ("pip-tools", "uv")
# The bundled model families: a family's scenarios share data and initial weights in every
# framework (compare-frameworks sets them side by side).
MODEL_FAMILIES = ("mlp", "lm", "cnn")

# Bounds the command line declares its options with (and the config its keys).
# steps: of a scenario, --steps or the `steps` keys.
MAX_STEPS = 1_000_000
# --repeat: runs per scenario; past 100 a median or a noise envelope no longer moves, and a
# gate that repeats more is a typo (10**9 would plan a billion runs).
MAX_REPEAT = 100
# --shards / --shard K/N: parts of a plan; 256 is the most jobs one GitHub Actions matrix runs.
MAX_SHARDS = 256


class Verdict(str, Enum):
    """What comparing one scenario's run with its baseline can conclude; PRECEDENCE orders them,
    and a Policy's fail_on says which fail the gate."""

    identical = "identical"  # bitwise equal
    # Not re-run: the lock, the scenario and the settings are as when its golden was recorded
    # on this hardware class, so the golden's answer stands (check --rerun runs it).
    unchanged = "unchanged"
    within_tolerance = "within_tolerance"  # differs, but inside the dtype's tolerance
    drift = "drift"  # numerics moved beyond tolerance
    # Only the hardware differs from the golden's (same lock, scenario and settings): the numbers
    # moved with the machine, which says nothing about the dependencies. Shown, not judged.
    other_hardware = "other_hardware"
    compile_fallback = "compile_fallback"  # more graph breaks, retraces, eager fallbacks, no XLA
    device_fallback = "device_fallback"  # ran on another device than expected (cuda -> cpu)
    slower = "slower"  # steady-state steps slower, measured A/B on one machine
    # The training's peak host (or accelerator) memory grew, measured A/B on one machine: a
    # dependency that allocates more fits today's runner and fails on tomorrow's bigger batch.
    heavier = "heavier"
    broken = "broken"  # the candidate crashed, produced NaN or timed out
    new = "new"  # nothing to compare with yet
    # A healthy run that is a measurement, with nothing to compare by design (compare-frameworks
    # sets frameworks side by side; their numbers differ from step 1 on by design).
    measured = "measured"
    incomparable = "incomparable"  # the runs cannot be compared (steps, dtype, broken baseline)
    skipped = "skipped"  # not run at all (framework absent from the lock, device missing)


VERDICT_NAMES = tuple(v.value for v in Verdict)
# Verdicts that need no word beyond their row: nothing moved (or a measurement).
QUIET_VERDICTS = (Verdict.identical, Verdict.unchanged, Verdict.measured)


# When several findings apply, the verdict is the first of them in this order. A broken run
# says nothing about numerics; a run on the wrong device makes its numerics meaningless; and
# so on down to "identical", which only holds when nothing else was found.
PRECEDENCE: tuple[Verdict, ...] = (
    Verdict.broken,
    Verdict.device_fallback,
    Verdict.incomparable,
    Verdict.new,
    Verdict.compile_fallback,
    Verdict.drift,
    Verdict.other_hardware,
    Verdict.slower,
    Verdict.heavier,
    Verdict.within_tolerance,
    Verdict.measured,
    Verdict.identical,
    Verdict.unchanged,
    Verdict.skipped,
)
