"""The numpy harness module: a framework-free reference, and a guard for numpy upgrades.

Runs inside the target environment: imports the stdlib, numpy and the shared generator only.
See run.py for the interface (NAME, setup, SCENARIOS, run_user).

Bundled scenario:
    numpy.mlp   gen.MLP with a hand-written forward/backward and Adam, all in float32, following
                torch.optim.Adam's update exactly (bias corrections, eps added after the
                bias-corrected square root), so its step-0 loss matches torch.mlp's and jax's.
numpy runs on the CPU only: an expected cuda/tpu device is recorded as a fallback to "cpu".

User scripts: the contract of userscript.py (run(steps, seed) returns losses or a dict with
"losses", "outputs", "grad_norms", "metrics", "params", "step_times"). Arrays are numpy arrays,
numpy scalars, and any other object exposing __array__ (a tensor of another library the script
happens to use); params become numpy arrays (np.asarray) and are digested in their own dtype.

Where a user scenario's drift starts (lockguard's --locate): the harness gives the script's module
a global `lockguard_capture(step, name, value)` that returns `value`; in a localisation run
(--locate-step N) it records the value of every call made with step == N, in call order, as a
capture (locate_arrays.py: name, dtype as its type, the value): the host names the first value
that differs, with its dtypes (NEP 50: float64 → float32). A script run by hand defines its own
no-op (`def lockguard_capture(step, name, value): return value`); the harness replaces it
(userscript.py, locate_arrays.HostUserCapture: the protocol the torch, jax and tf modules share).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Tuple

import numpy as np

from . import gen
from .common import attempt as _try
from .common import host_floats, le_bytes, seed_host_rngs
from .locate_arrays import HostUserCapture
from .userscript import host_array_adapter, run_script

NAME = "numpy"

F32 = np.float32


# --------------------------------------------------------------------------- setup

def _multiarray():
    """numpy's C core module (numpy._core since 2.0, numpy.core before)."""
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        module = _try(lambda n=name: __import__(n, fromlist=["_"]))
        if module is not None:
            return module
    return None


def _build_info() -> Dict[str, Any]:
    """BLAS/LAPACK and SIMD facts, from static build data (no threadpool probing, no printing)."""
    info: Dict[str, Any] = {}
    config = _try(lambda: np.__config__.CONFIG)  # numpy >= 1.26: a plain dict
    if isinstance(config, dict):
        deps = config.get("Build Dependencies", {})
        for lib in ("blas", "lapack"):
            entry = deps.get(lib) or {}
            info[lib] = {k: entry.get(k) for k in ("name", "version", "openblas configuration")
                         if entry.get(k) is not None}
    else:  # older numpy: distutils-style info dicts
        for lib, attr in (("blas", "blas_opt_info"), ("lapack", "lapack_opt_info")):
            entry = _try(lambda a=attr: getattr(np.__config__, a)) or {}
            if isinstance(entry, dict):
                info[lib] = {"libraries": entry.get("libraries"),
                             "define_macros": [list(m) for m in entry.get("define_macros", [])]}
    core = _multiarray()
    if core is not None:
        features = getattr(core, "__cpu_features__", {}) or {}
        dispatch = getattr(core, "__cpu_dispatch__", []) or []
        info["simd_baseline"] = list(getattr(core, "__cpu_baseline__", []) or [])
        info["simd_dispatch"] = [f for f in dispatch if features.get(f)]
    return info


def setup(ctx) -> None:
    seed_host_rngs(ctx.seed, np)
    result = ctx.result
    result["framework_version"] = np.__version__
    result["device"] = "cpu"
    result["device_name"] = "cpu"
    fp = result["fingerprint"]
    fp["device_requested"] = ctx.device
    if ctx.device != "cpu":
        fp["device_fallback"] = f"numpy has no {ctx.device} backend: ran on the cpu"
    fp["numpy_build"] = dict(_build_info(), version=np.__version__)
    # numpy's BLAS threads are pinned by the *_NUM_THREADS variables run.py sets before import.
    fp["determinism"] = {"seed": ctx.seed, "threads": ctx.threads,
                         "global_rng": "numpy.random.seed(seed), random.seed(seed)"}


# --------------------------------------------------------------------------- numpy.mlp

def _array(t: gen.Tensor) -> np.ndarray:
    shape, values = t
    return np.array(values, dtype=F32).reshape(shape)


class Adam:
    """torch.optim.Adam (single-tensor path, no weight decay, no amsgrad), in float32."""

    def __init__(self, params: Dict[str, np.ndarray], lr: float, betas=gen.BETAS,
                 eps: float = gen.EPS) -> None:
        self.params = params
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: Dict[str, np.ndarray]) -> None:
        self.t += 1
        # Scalars are Python floats (float64), as in torch; they apply to float32 arrays.
        step_size, bias2_sqrt = gen.adam_host_scalars(self.t, self.lr, (self.beta1, self.beta2))
        for k, p in self.params.items():
            g = grads[k]
            m, v = self.m[k], self.v[k]
            m += (g - m) * F32(1 - self.beta1)  # torch: exp_avg.lerp_(grad, 1 - beta1)
            v *= F32(self.beta2)
            v += (g * g) * F32(1 - self.beta2)  # torch: mul_(beta2).addcmul_(g, g, 1 - beta2)
            denom = np.sqrt(v) / F32(bias2_sqrt) + F32(self.eps)
            p -= F32(step_size) * (m / denom)


def mlp_forward(p: Dict[str, np.ndarray], x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(hidden activations, logits)."""
    h = np.tanh(x @ p["w1"].T + p["b1"])
    return h, h @ p["w2"].T + p["b2"]


def mlp_loss_and_grads(p: Dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray
                       ) -> Tuple[float, Dict[str, np.ndarray]]:
    """Mean cross-entropy and its gradients, by hand, in float32."""
    h, logits = mlp_forward(p, x)
    n = x.shape[0]
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    logp = shifted - np.log(total)
    loss = -logp[np.arange(n), labels].mean(dtype=F32)
    dlogits = exp / total
    dlogits[np.arange(n), labels] -= F32(1)
    dlogits /= F32(n)
    dz = (dlogits @ p["w2"]) * (F32(1) - h * h)
    grads = {
        "w1": dz.T @ x,
        "b1": dz.sum(axis=0, dtype=F32),
        "w2": dlogits.T @ h,
        "b2": dlogits.sum(axis=0, dtype=F32),
    }
    return float(loss), grads


def _grad_norm(grads: Dict[str, np.ndarray]) -> float:
    return float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values())))


def _norm(a: np.ndarray) -> float:
    return float(np.sqrt((a.astype(np.float64) ** 2).sum()))


def _record_params(ctx, params: Dict[str, np.ndarray]) -> None:
    ctx.set_params([(k, le_bytes(v)) for k, v in params.items()],
                   {k: _norm(v) for k, v in params.items()})


def _mlp(ctx) -> None:
    params = {k: _array(v) for k, v in gen.mlp_params(ctx.seed).items()}
    x_t, labels, probe_t = gen.mlp_data(ctx.seed)
    x, probe = _array(x_t), _array(probe_t)
    y = np.array(labels, dtype=np.int64)
    opt = Adam(params, lr=gen.MLP["lr"], betas=gen.BETAS, eps=gen.EPS)
    for _ in range(ctx.steps):
        start = time.perf_counter()
        loss, grads = mlp_loss_and_grads(params, x, y)
        norm = _grad_norm(grads)
        opt.step(grads)
        ctx.record_step(loss, norm, time.perf_counter() - start)
    _, logits = mlp_forward(params, probe)
    ctx.set_outputs(*host_floats(logits))
    _record_params(ctx, params)


SCENARIOS: Dict[str, Callable[[Any], None]] = {"numpy.mlp": _mlp}


# --------------------------------------------------------------------------- user scripts

def _is_array(value: Any) -> bool:
    """numpy arrays and scalars, and objects exposing __array__ that are not plain containers."""
    if isinstance(value, (np.ndarray, np.generic)):
        return True
    return not isinstance(value, (list, tuple, dict, str, bytes)) and hasattr(value, "__array__")


def run_user(ctx, module) -> None:
    """Run a user script's run(steps, seed) with the global RNGs seeded and its module's
    lockguard_capture given (module docstring)."""
    seed_host_rngs(ctx.seed, np)  # the script was imported after setup(): seed again
    run_script(ctx, module, host_array_adapter(_is_array, np.asarray, norm=_norm),
               capture=HostUserCapture(getattr(ctx, "locate_step", None), np.asarray))
