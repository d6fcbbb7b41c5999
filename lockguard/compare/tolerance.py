"""Tolerances and the gate policy: `Tolerance` (the one validation of rtol/atol, also what the
config's `tolerance = {rtol, atol}` is read into), the per-dtype default table, and `Policy`.
"""

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from lockguard.names import PRECEDENCE, Verdict


# A gate passes only what it compared: `incomparable` fails too (a golden of another scenario,
# other steps, a broken baseline are no evidence that nothing changed).
DEFAULT_FAIL_ON = frozenset(
    {Verdict.drift, Verdict.compile_fallback, Verdict.device_fallback, Verdict.broken,
     Verdict.incomparable}
)


class Tolerance(BaseModel):
    """Allowed difference per value: |new - old| <= atol + rtol * |old|, as torch.testing.

    The only place a tolerance is validated: the config reads `tolerance = {rtol, atol}` into
    this model, so a bound checked here holds for the defaults, the config and the CLI alike.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    rtol: float = Field(ge=0, allow_inf_nan=False)
    atol: float = Field(ge=0, allow_inf_nan=False)
    exact: bool = False  # bitwise equality required; rtol/atol are then ignored

    def allowed(self, baseline: float) -> float:
        """The greatest |new - old| allowed against the baseline value `baseline` (0 in exact
        mode): the one formula the verdict uses and the HTML report draws as its band."""
        return 0.0 if self.exact else self.atol + self.rtol * abs(baseline)


# torch.testing.assert_close's defaults (rtol, atol). Users know these numbers already.
_DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}

_DTYPE_ALIASES = {
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "float": "float32",  # torch.float is float32
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "double": "float64",
    "fp64": "float64",
    "f64": "float64",
}


def normalise_dtype(dtype: str) -> str:
    """The canonical float dtype name for `dtype` ("torch.bfloat16" -> "bfloat16").

    Anything unrecognised counts as float32: it is the harness default, and its tolerance is
    a middle ground rather than a silent "anything goes".
    """
    name = dtype.strip().lower().rsplit(".", 1)[-1]  # torch.float32, tf.float32, jnp.float32
    name = _DTYPE_ALIASES.get(name, name)
    return name if name in _DEFAULT_TOLERANCES else "float32"


def default_tolerance(dtype: str) -> Tolerance:
    """torch.testing.assert_close's default tolerance for `dtype`; unknown dtypes get float32's."""
    rtol, atol = _DEFAULT_TOLERANCES[normalise_dtype(dtype)]
    return Tolerance(rtol=rtol, atol=atol)


class Policy(BaseModel):
    """The gate's rules for one check: exactness or a tolerance override, which verdicts fail,
    and the ratios and noise floors above which a run counts as slower or heavier."""

    model_config = ConfigDict(defer_build=True)

    exact: bool = False  # bitwise equality required
    tolerance: Tolerance | None = None  # override of the per-dtype default
    fail_on: frozenset[Verdict] = DEFAULT_FAIL_ON
    slower_ratio: float = Field(default=1.30, gt=0)  # candidate/baseline step median above this
    # Steps this short are mostly interpreter overhead and scheduler noise on a shared machine
    # (measured here: sub-millisecond mlp steps "slowed" up to 6× between identical runs), so
    # they never make a `slower` verdict; the ratio is still reported.
    slower_min_step_s: float = Field(default=0.002, ge=0)
    heavier_ratio: float = Field(default=1.20, gt=1.0)  # candidate/baseline peak memory above this
    # A peak that rose by less than this is noise, never `heavier` (the ratio is still reported).
    # The same code's training peak moves by under 1 MiB from run to run, eager or with a warm
    # compiler cache; a cold inductor cache adds the compiler's own work (torch.lm.compile: 23
    # MiB, ×1.23), and A/B meets one whenever the candidate's compilers are new (a venv shares
    # the cache of venvs whose compilers are pinned alike). The floor is twice that.
    heavier_min_bytes: int = Field(default=48 << 20, ge=0)
    fail_on_improvement: bool = False  # fewer graph breaks etc. fails the gate when True

    @field_serializer("fail_on")
    def _fail_on_in_order(self, fail_on: frozenset[Verdict]) -> list[str]:
        # A set has no stable order; reports should not change from one run to the next.
        return [verdict.value for verdict in PRECEDENCE if verdict in fail_on]


def effective_tolerance(policy: Policy, override: Tolerance | None, dtype: str) -> Tolerance:
    """The scenario's own `override` beats policy.tolerance, which beats the dtype default;
    `policy.exact` makes any of them exact."""
    tol = override or policy.tolerance or default_tolerance(dtype)
    if policy.exact and not tol.exact:
        tol = tol.model_copy(update={"exact": True})
    return tol
