"""The numpy harness module: a framework-free reference, and a guard for numpy upgrades.

Runs inside the target environment: imports the stdlib, numpy and the shared generator only.
See run.py for the interface (NAME, setup, SCENARIOS, run_user).

Bundled scenario:
    numpy.mlp   gen.MLP with a hand-written forward/backward and Adam, all in float32, following
                torch.optim.Adam's update exactly (bias corrections, eps added after the
                bias-corrected square root), so its step-0 loss matches torch.mlp's and jax's.
numpy runs on the CPU only: an expected cuda/tpu device is recorded as a fallback to "cpu".

User scripts: as for torch_ (see torch_.py): run(steps, seed) returns a list of losses or a dict
{"losses", "outputs", "grad_norms", "metrics", "params", "step_times"} with numpy arrays,
numpy scalars, Python numbers or nested lists. The wall time of run() goes to metrics["run_s"];
per-step timings stay None unless the script returns "step_times".
"""

from __future__ import annotations

import random
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import gen

NAME = "numpy"

F32 = np.float32


# --------------------------------------------------------------------------- setup

def _try(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except Exception:  # noqa: BLE001
        return default


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
    np.random.seed(ctx.seed)
    random.seed(ctx.seed)
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

    def __init__(self, params: Dict[str, np.ndarray], lr: float, betas=(0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = params
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: Dict[str, np.ndarray]) -> None:
        self.t += 1
        # Scalars are Python floats (float64), as in torch; they apply to float32 arrays.
        bias1 = 1 - self.beta1 ** self.t
        bias2_sqrt = (1 - self.beta2 ** self.t) ** 0.5
        step_size = self.lr / bias1
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


def _record_params(ctx, params: Dict[str, np.ndarray]) -> None:
    norms = {k: float(np.sqrt((v.astype(np.float64) ** 2).sum())) for k, v in params.items()}
    ctx.set_params([(k, _raw_bytes(v)) for k, v in params.items()], norms)


def _raw_bytes(value: Any) -> bytes:
    a = np.asarray(value)
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False)).tobytes()


def _mlp(ctx) -> None:
    params = {k: _array(v) for k, v in gen.mlp_params(ctx.seed).items()}
    x_t, labels, probe_t = gen.mlp_data(ctx.seed)
    x, probe = _array(x_t), _array(probe_t)
    y = np.array(labels, dtype=np.int64)
    opt = Adam(params, lr=gen.MLP["lr"], betas=(0.9, 0.999), eps=1e-8)
    for _ in range(ctx.steps):
        start = time.perf_counter()
        loss, grads = mlp_loss_and_grads(params, x, y)
        norm = _grad_norm(grads)
        opt.step(grads)
        ctx.record_step(loss, norm, time.perf_counter() - start)
    _, logits = mlp_forward(params, probe)
    ctx.set_outputs(logits.astype(np.float64).reshape(-1).tolist(), list(logits.shape))
    _record_params(ctx, params)


SCENARIOS: Dict[str, Callable[[Any], None]] = {"numpy.mlp": _mlp}


# --------------------------------------------------------------------------- user scripts

class UserResultError(TypeError):
    """What a user script's run() returned does not follow the contract."""


USER_KEYS = ("losses", "outputs", "grad_norms", "metrics", "params", "step_times")


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{type(value).__name__} {text}"


def _as_array(value: Any) -> Optional[np.ndarray]:
    """Array-likes that are not plain Python containers: ndarrays, and objects exposing
    __array__ (e.g. tensors of another library the script happens to use)."""
    if isinstance(value, np.ndarray):
        return value
    if not isinstance(value, (list, tuple, dict, str, bytes)) and hasattr(value, "__array__"):
        return _try(lambda: np.asarray(value))
    return None


def _flatten(value: Any, what: str) -> Tuple[List[float], List[int]]:
    a = _as_array(value)
    if a is None:
        if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes, dict)):
            raise UserResultError(f"{what} must be numbers, got {_describe(value)}")
        if isinstance(value, (list, tuple)):
            if not value:
                return [], [0]
            parts = [_flatten(v, f"{what}[{i}]") for i, v in enumerate(value)]
            inner = parts[0][1]
            for i, (_, shape) in enumerate(parts):
                if shape != inner:
                    raise UserResultError(f"{what} is ragged: element 0 has shape {inner}, "
                                          f"element {i} has shape {shape}")
            return [x for flat, _ in parts for x in flat], [len(value)] + inner
        a = _try(lambda: np.asarray(value))
        if a is None:
            raise UserResultError(f"{what} must be numbers, got {_describe(value)}")
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.number) or np.iscomplexobj(a):
        raise UserResultError(f"{what} must be real numbers, got {_describe(value)}")
    f = a.astype(np.float64)  # exact for every float32/float16 value
    return f.reshape(-1).tolist(), list(f.shape)


def _number(value: Any, what: str) -> float:
    if isinstance(value, (bool, np.bool_, str, bytes, dict, list, tuple)) or value is None:
        raise UserResultError(f"{what} must be a number, got {_describe(value)}")
    flat, shape = _flatten(value, what)
    if len(flat) != 1:
        raise UserResultError(f"{what} must be a number, got an array of shape {shape}")
    return flat[0]


def _seq(value: Any, what: str) -> List[float]:
    if not isinstance(value, (list, tuple)) and _as_array(value) is None:
        raise UserResultError(f"{what} must be a sequence of numbers, got {_describe(value)}")
    if isinstance(value, (list, tuple)):
        return [_number(v, f"{what}[{i}]") for i, v in enumerate(value)]
    flat, shape = _flatten(value, what)
    if len(shape) != 1:
        raise UserResultError(f"{what} must be one-dimensional, got shape {shape}")
    return flat


def apply_user_result(ctx, returned: Any, run_seconds: float) -> None:
    """Validate what run() returned and fill the result; UserResultError says what is wrong."""
    if isinstance(returned, dict):
        if "losses" not in returned:
            raise UserResultError(f"run() returned a dict without 'losses' (keys: "
                                  f"{sorted(map(str, returned))}); expected {list(USER_KEYS)}")
        unknown = sorted(str(k) for k in returned if k not in USER_KEYS)
        if unknown:
            raise UserResultError(f"run() returned unknown keys {unknown}; "
                                  f"allowed: {list(USER_KEYS)}")
        spec = returned
    elif isinstance(returned, (list, tuple)) or _as_array(returned) is not None:
        spec = {"losses": returned}
    else:
        raise UserResultError(
            "run(steps, seed) must return a list of per-step losses or a dict with 'losses'; "
            f"it returned {_describe(returned)}")
    losses = _seq(spec["losses"], "losses")
    if not losses:
        raise UserResultError("losses is empty: run() must return at least one step's loss")
    grad_norms = _seq(spec["grad_norms"], "grad_norms") if spec.get("grad_norms") is not None \
        else None
    step_times = None
    if spec.get("step_times") is not None:
        step_times = _seq(spec["step_times"], "step_times")
        if len(step_times) != len(losses):
            raise UserResultError(f"step_times has {len(step_times)} entries for "
                                  f"{len(losses)} losses")
    metrics = {}
    if spec.get("metrics") is not None:
        if not isinstance(spec["metrics"], dict):
            raise UserResultError(f"metrics must be a dict of numbers, got "
                                  f"{_describe(spec['metrics'])}")
        metrics = {str(k): _number(v, f"metrics[{k!r}]") for k, v in spec["metrics"].items()}
    if spec.get("outputs") is not None:
        ctx.set_outputs(*_flatten(spec["outputs"], "outputs"))
    if spec.get("params") is not None:
        if not isinstance(spec["params"], dict):
            raise UserResultError(f"params must be a dict name -> array, got "
                                  f"{_describe(spec['params'])}")
        arrays = {}
        for k, v in spec["params"].items():
            a = _as_array(v)
            if a is None:
                a = _try(lambda v=v: np.asarray(v))
            if a is None or not np.issubdtype(a.dtype, np.number):
                raise UserResultError(f"params[{k!r}] is not a numeric array: {_describe(v)}")
            arrays[str(k)] = a
        _record_params(ctx, arrays)

    if step_times is not None:
        for loss, seconds in zip(losses, step_times):
            ctx.record_step(loss, None, seconds)
    else:
        ctx.result["losses"].extend(losses)
    if grad_norms is not None:
        ctx.result["grad_norms"] = grad_norms
    ctx.result["metrics"].update(metrics)
    ctx.result["metrics"]["run_s"] = run_seconds


def run_user(ctx, module) -> None:
    """Run a user script's run(steps, seed) with the global RNGs seeded."""
    np.random.seed(ctx.seed)  # the script was imported after setup(): seed again
    random.seed(ctx.seed)
    start = time.perf_counter()
    returned = module.run(ctx.steps, ctx.seed)
    apply_user_result(ctx, returned, time.perf_counter() - start)

