"""The JAX harness module: determinism, fingerprint, bundled scenarios and user scripts.

Runs inside the target environment: imports the stdlib, jax (with jaxlib), numpy and the shared
generator. See run.py for the interface (NAME, setup, SCENARIOS, run_user).

jax is imported by setup(), not at the top of this module: XLA reads XLA_FLAGS and jax reads
JAX_PLATFORMS when the backend starts, so setup() sets them from the run's arguments first and
only then imports jax. setup() records the framework's import time in timings.import_s (run.py
only sees this module's import, which is stdlib only).

Bundled scenarios (sizes and hyper-parameters from gen.py; weights kept in gen's (out, in) layout,
so a linear layer is x @ W.T + b and the parameter digest is over gen's layout and order):
    jax.mlp      gen.MLP, one jax.jit'ed step (loss, grad and Adam update together)
    jax.lm       gen.LM (pre-LN GPT, exact erf GELU, explicit causal mask + softmax), AdamW
    jax.lm.bf16  jax.lm with torch.autocast(bfloat16)'s casting policy written out by hand: the
                 inputs, weights and biases of every matmul / linear are cast to bfloat16 and its
                 result stays bfloat16 (qkv, q@k^T, probs@v, proj, fc1, fc2, head); GELU is
                 computed in float32 from the bfloat16 value and rounded back to bfloat16 (what
                 torch does for a bf16 tensor); layer norms, the attention softmax, the residual
                 stream and the loss are float32; parameters and Adam state are float32 masters.
                 dtype "bfloat16"; probe logits are the bf16 values widened to float32.
    jax.rng      the mlp initialised by jax.random from the seed (PRNGKey(seed), split in four,
                 uniform(+-1/sqrt(fan_in)) like nn.Linear): jax's own RNG stream; data from gen
    jax.dp       gen.MLP jitted over 2 devices (XLA's CPU client split in two on the CPU, 2 GPUs
                 on cuda, where XLA all-reduces over NCCL): the batch sharded, the parameters
                 replicated, loss and gradients all-reduced
    jax.cnn      gen.CNN in torch's layouts (lax.conv_general_dilated over NCHW/OIHW), BatchNorm
                 written out as torch computes it; the running statistics are state the jitted
                 step returns (train_with_state), the probe uses them, the digest covers them
    jax.cnn.bf16 jax.cnn with autocast's policy: convolutions and the linear layer in bfloat16,
                 BatchNorm computed in float32 and returned in bfloat16
    jax.data     gen.MLP trained from a numpy input pipeline (gen.DATA): each epoch shuffled by
                 numpy's Generator (default_rng(seed).permutation), mapped, batched, and
                 prefetched onto the device by a background thread; every batch's sample ids
                 are recorded
Adam / AdamW are written out to match torch.optim's single-tensor implementation operation by
operation: m = m + (1-b1)(g-m); v = v*b2 + (1-b2)*g*g; bias corrections computed on the host in
float64 each step (step_size = lr/(1-b1^t), sqrt(1-b2^t)) and passed in as float32 scalars (so the
step traces once); denom = sqrt(v)/sqrt(bc2) + eps; p = p + (-step_size*m)/denom; AdamW first
decays p = p*(1 - lr*wd).

Determinism (recorded in fingerprint["determinism"]):
  * cuda: XLA_FLAGS += --xla_gpu_deterministic_ops=true (XLA's deterministic GPU reductions and
    scatters); XLA_PYTHON_CLIENT_PREALLOCATE=false.
  * --threads 1: XLA_FLAGS += --xla_cpu_multi_thread_eigen=false. Two runs are bitwise identical
    with or without it, but XLA's default runs Eigen on a thread pool sized by the machine's
    cores, and its results differ from single-threaded Eigen (measured on jax.lm: with jaxlib
    0.9.2 the gradient norms from step 0 and the losses from step 6, with 0.10.2 the probe
    outputs), so without the flag a golden could depend on the machine's core count. Nothing else is forced: an XLA flag that a jaxlib does not know aborts
    the process, so every flag set here must exist in every supported jaxlib (this one does in
    0.9.2 and 0.10.2; the pseudo-flag "intra_op_parallelism_threads=1" is silently ignored by
    XLA's parser and so is not used). With --threads N > 1, XLA's default threading is kept.
  * bundled scenarios set jax_default_matmul_precision="highest": float32 matmuls are true
    float32 everywhere (on CUDA jax's default would allow TF32; torch's bundled scenarios turn
    it off too, torch_.setup); on CPU it changes nothing. User scripts keep the precision they
    ask for (it is recorded).
Per step: loss (the float32 value as an exact Python float), the global gradient norm before the
update (exact: math.fsum of float64 squares of the float32 gradients, then sqrt), the wall time
of the step after block_until_ready. compile: traces of the train step (a counter in the traced
Python function), backend compilations and compile seconds per jitted function (jax.monitoring).

User scripts: the contract of userscript.py (run(steps, seed) returns losses or a dict with
"losses", "outputs", "grad_norms", "metrics", "params", "step_times"); arrays are jax arrays,
numpy arrays and numpy scalars, params become numpy arrays on the host (np.asarray of anything
else) and are digested in their own dtype (bfloat16 widened to float32). setup() wraps jax.jit
before the script is imported, so the traces (and compilations) of every function the script jits
are counted, by function name.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import devices, gen
from .common import attempt as _try
from .common import (Batches, global_norm, host_floats, le_bytes, recorded_env,
                    seed_host_rngs, sum_squares)
from .locate_arrays import HostUserCapture
from .locate_jax import capture, tap
from .userscript import host_array_adapter, run_script

NAME = "jax"

# Filled by setup(): the framework is imported only after its environment variables are set.
jax: Any = None
jnp: Any = None
np: Any = None

_STATE: Dict[str, Any] = {
    "device": None,            # the jax.Device used
    "compiles": {},            # fun_name -> backend compilations (from jax.monitoring)
    "compile_s": {},           # fun_name -> seconds in backend compilation
    "user_traces": {},         # user function name -> traces
}


# --------------------------------------------------------------------------- setup

def _env_before_import(ctx) -> Dict[str, Any]:
    """Set the variables jax/XLA read at backend start; returns what was decided."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    wanted: List[str] = []
    if ctx.threads == 1:
        # XLA's CPU backend otherwise runs Eigen on a pool sized by the machine's cores; its
        # results differ from single-threaded Eigen (measured on jax.lm), so a pool whose size
        # depends on the machine could make goldens machine-dependent.
        wanted.append("--xla_cpu_multi_thread_eigen=false")
    if ctx.scenario == "jax.dp":
        # The data-parallel scenario's devices on the CPU: XLA's CPU client split in DP_DEVICES.
        # Only the CPU client reads it: on GPUs the devices are the GPUs, and a fallback from
        # them to the CPU still trains on DP_DEVICES (a device_fallback, not a crash).
        wanted.append(f"--xla_force_host_platform_device_count={DP_DEVICES}")
    if ctx.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    else:
        # Let jax pick the accelerator; without one it falls back to cpu (a device_fallback).
        os.environ.pop("JAX_PLATFORMS", None)
        if ctx.device == "cuda":
            wanted.append("--xla_gpu_deterministic_ops=true")
            os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    for flag in wanted:
        name = flag.split("=", 1)[0]
        if not any(f.split("=", 1)[0] == name for f in flags):
            flags.append(flag)
    if flags:
        os.environ["XLA_FLAGS"] = " ".join(flags)
    return {"xla_flags_added": wanted}


def _on_compile(name: str, seconds: float, **kwargs: Any) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        fun = str(kwargs.get("fun_name", "?"))
        if fun.startswith("jit(") and fun.endswith(")"):
            fun = fun[4:-1]
        _STATE["compiles"][fun] = _STATE["compiles"].get(fun, 0) + 1
        _STATE["compile_s"][fun] = _STATE["compile_s"].get(fun, 0.0) + seconds


def _fallback_cause(wanted: str) -> str:
    """Why jax started no backend of the device asked for."""
    if wanted == "cuda":
        if not any(name.startswith("jax-cuda") for name in _plugins()):
            return "jax has no CUDA plugin here (jax[cuda13] installs jax-cuda13-plugin)"
        return devices.cuda_missing() or "jax's CUDA backend did not start (no visible GPU)"
    return devices.tpu_missing() or "jax's TPU backend did not start (libtpu found no TPU)"


def _device_class(device: Any) -> str:
    platform = str(device.platform).lower()
    if platform in ("gpu", "cuda"):
        version = str(_try(lambda: device.client.platform_version, "")).lower()
        return "rocm" if "rocm" in version else "cuda"
    return platform  # cpu | tpu


def _plugins() -> Dict[str, str]:
    from importlib import metadata
    out = {}
    for dist in _try(lambda: list(metadata.distributions()), []):
        name = str(_try(lambda: dist.metadata["Name"], "") or "")
        norm = name.lower().replace("_", "-")
        if norm.startswith(("jax-cuda", "jax-rocm", "libtpu", "jax-tpu")):
            out[norm] = dist.version
    return out


def _cuda_versions() -> Optional[Dict[str, Any]]:
    """The CUDA runtime, cuDNN and cuBLAS the CUDA plugin loaded and the CUDA version the driver
    supports (jax's private cuda_versions module; its absence gives None)."""
    versions = _try(lambda: __import__("jax._src.lib", fromlist=["_"]).cuda_versions)
    if versions is None:
        return None
    return {name: _try(getattr(versions, f"{name}_get_version", lambda: None))
            for name in ("cuda_runtime", "cudnn", "cublas", "cuda_driver")}


def setup(ctx) -> None:
    global jax, jnp, np
    decided = _env_before_import(ctx)
    start = time.perf_counter()
    import numpy
    import jax as jax_module
    import jax.numpy as jnp_module
    jax, jnp, np = jax_module, jnp_module, numpy
    imported = time.perf_counter() - start
    timings = ctx.result["timings"]
    timings["import_s"] = (timings.get("import_s") or 0.0) + imported

    if not ctx.script:
        jax.config.update("jax_default_matmul_precision", "highest")
    _try(lambda: jax.monitoring.register_event_duration_secs_listener(_on_compile))

    device = jax.devices()[0]  # starts the backend
    _STATE["device"] = device
    cls = _device_class(device)
    ctx.result["device"] = cls
    ctx.result["device_name"] = f"{cls}:{device.id} {device.device_kind}" if cls != "cpu" else "cpu"
    ctx.result["framework_version"] = jax.__version__

    fp = ctx.result["fingerprint"]
    fp["env"] = recorded_env()
    fp["device_expected"] = ctx.device
    if ctx.device in ("cuda", "tpu") and cls != ctx.device:
        fp["device_fallback"] = _fallback_cause(ctx.device)
    fp["jax"] = jax.__version__
    fp["jaxlib"] = _try(lambda: __import__("jaxlib").__version__)
    fp["ml_dtypes"] = _try(lambda: __import__("ml_dtypes").__version__)
    fp["numpy"] = numpy.__version__
    fp["jax_plugins"] = _plugins()
    fp["backend"] = {
        "default_backend": _try(jax.default_backend),
        "platform": device.platform,
        "platform_version": _try(lambda: device.client.platform_version),
        "device_kind": device.device_kind,
        "device_count": _try(jax.device_count),
    }
    if cls == "cuda":
        fp["cuda"] = _cuda_versions()
    fp["prng"] = {
        "default_prng_impl": _try(lambda: str(jax.config.jax_default_prng_impl)),
        "threefry_partitionable": _try(lambda: bool(jax.config.jax_threefry_partitionable)),
    }
    fp["x64"] = _try(lambda: bool(jax.config.jax_enable_x64))
    fp["determinism"] = {
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "xla_flags_added": decided["xla_flags_added"],
        "gpu_deterministic_ops": "--xla_gpu_deterministic_ops=true" in
                                 os.environ.get("XLA_FLAGS", "").split(),
        "jax_default_matmul_precision": _try(
            lambda: str(jax.config.jax_default_matmul_precision)),
        "cpu_eigen_single_threaded": "--xla_cpu_multi_thread_eigen=false" in
                                     os.environ.get("XLA_FLAGS", "").split(),
    }
    if ctx.script:
        _install_jit_counter()


# --------------------------------------------------------------------------- helpers

def _to_jax(t: gen.Tensor) -> Any:
    shape, flat = t
    return jax.device_put(np.array(flat, dtype=np.float32).reshape(shape), _STATE["device"])


def _host(x: Any) -> Any:
    return np.asarray(jax.device_get(x))


def _record_params(ctx, params: Dict[str, Any]) -> None:
    host = {name: _host(p) for name, p in params.items()}
    ctx.set_params([(name, le_bytes(a.astype(np.float32))) for name, a in host.items()],
                   {name: math.sqrt(sum_squares(a)) for name, a in host.items()})


def _cross_entropy(logits: Any, labels: Any) -> Any:
    """Mean cross-entropy of integer labels, in float32 (torch's log_softmax + nll mean)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    return -jnp.mean(picked)


# --------------------------------------------------------------------------- optimiser

BETAS, EPS = gen.BETAS, gen.EPS


def _adam_update(params: Dict[str, Any], grads: Dict[str, Any], m: Dict[str, Any],
                 v: Dict[str, Any], step_size: Any, bc2_sqrt: Any,
                 decay: Optional[float]) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    b1, b2 = BETAS
    new_p, new_m, new_v = {}, {}, {}
    for name, p in params.items():
        g = grads[name]
        if decay is not None:
            p = p * decay  # AdamW: decoupled decay before the Adam step
        mn = m[name] + (1 - b1) * (g - m[name])          # exp_avg.lerp_(g, 1 - b1)
        vn = v[name] * b2 + (1 - b2) * g * g             # mul_(b2).addcmul_(g, g, 1 - b2)
        denom = jnp.sqrt(vn) / bc2_sqrt + EPS
        new_p[name] = p + (-step_size * mn) / denom      # addcdiv_(m, denom, -step_size)
        new_m[name], new_v[name] = mn, vn
    return new_p, new_m, new_v


def train(ctx, params: Dict[str, Any], loss_fn: Callable[..., Any],
          probe_fn: Callable[[Dict[str, Any]], Any], lr: float,
          weight_decay: Optional[float] = None, batches: Optional[Batches] = None) -> None:
    """The one training loop of every bundled jax scenario: a single jitted step.

    `batches` (the data scenarios): each step's inputs, handed to loss_fn(params, *inputs) as
    arguments of the jitted step (one trace: the shapes never change); a step's time includes
    fetching its batch."""
    traces = [0]
    order = list(params)  # gen's order: jit returns dicts with sorted keys
    decay = None if weight_decay is None else 1 - lr * weight_decay

    def train_step(params, m, v, step_size, bc2_sqrt, *inputs):
        traces[0] += 1  # runs only while jax traces the function
        loss, grads = jax.value_and_grad(loss_fn)(params, *inputs)
        new_p, new_m, new_v = _adam_update(params, grads, m, v, step_size, bc2_sqrt, decay)
        return new_p, new_m, new_v, loss, grads

    step_fn = jax.jit(train_step)
    m = {k: jnp.zeros_like(p) for k, p in params.items()}
    v = {k: jnp.zeros_like(p) for k, p in params.items()}
    for step in range(1, ctx.steps + 1):
        step_size, bc2_sqrt = (np.float32(v) for v in gen.adam_host_scalars(step, lr))
        start = time.perf_counter()
        inputs, ids = next(batches.iterator) if batches is not None else ((), None)
        if step - 1 == getattr(ctx, "locate_step", None):
            # A localisation run records the step's layers as its weights enter it.
            ctx.result["capture"] = capture(step - 1, ctx.scenario, params, loss_fn, params,
                                            *inputs)
        params, m, v, loss, grads = step_fn(params, m, v, step_size, bc2_sqrt, *inputs)
        jax.block_until_ready((params, m, v, loss, grads))
        seconds = time.perf_counter() - start
        ctx.record_step(float(_host(loss)), global_norm(_host(g) for g in grads.values()), seconds)
        if ids is not None:
            ctx.record_batch(ids, batches.per_epoch)
    ctx.set_outputs(*host_floats(_host(jax.jit(probe_fn)(params))))
    _record_params(ctx, {name: params[name] for name in order})
    compile_info: Dict[str, Any] = {"traces": {"train_step": traces[0]}}
    if "train_step" in _STATE["compiles"]:
        compile_info["compilations"] = {"train_step": _STATE["compiles"]["train_step"]}
        compile_info["compile_s"] = _STATE["compile_s"]["train_step"]
    ctx.result["compile"] = compile_info


# --------------------------------------------------------------------------- models

def _mlp_forward(p: Dict[str, Any], x: Any) -> Any:
    # tap: a layer's output, recorded by a localisation run only (locate_jax.py)
    z = tap("fc1", "Linear", x @ p["w1"].T + p["b1"], x)
    h = tap("tanh", "Tanh", jnp.tanh(z), z)
    return tap("fc2", "Linear", h @ p["w2"].T + p["b2"], h)


def _mlp(ctx, init: str = "gen") -> None:
    c = gen.MLP
    if init == "jax":
        key = jax.random.PRNGKey(ctx.seed)
        k1, k2, k3, k4 = jax.random.split(key, 4)
        s1, s2 = 1.0 / math.sqrt(c["in"]), 1.0 / math.sqrt(c["hidden"])
        u = jax.random.uniform
        params = {
            "w1": u(k1, (c["hidden"], c["in"]), jnp.float32, -s1, s1),
            "b1": u(k2, (c["hidden"],), jnp.float32, -s1, s1),
            "w2": u(k3, (c["classes"], c["hidden"]), jnp.float32, -s2, s2),
            "b2": u(k4, (c["classes"],), jnp.float32, -s2, s2),
        }
        params = {k: jax.device_put(p, _STATE["device"]) for k, p in params.items()}
    else:
        params = {k: _to_jax(t) for k, t in gen.mlp_params(ctx.seed).items()}
    x_t, labels, probe_t = gen.mlp_data(ctx.seed)
    x, probe = _to_jax(x_t), _to_jax(probe_t)
    y = jax.device_put(np.array(labels, dtype=np.int32), _STATE["device"])
    train(ctx, params, lambda p: _cross_entropy(_mlp_forward(p, x), y),
          lambda p: _mlp_forward(p, probe), c["lr"])


def _prefetched(source: Iterator[Any], depth: int) -> Iterator[Any]:
    """`source` produced on a background thread, at most `depth` items ahead of the consumer."""
    ready: "queue.Queue[Any]" = queue.Queue(maxsize=depth)
    failed = object()

    def produce() -> None:
        try:
            for item in source:
                ready.put(item)  # blocks while `depth` items wait; a daemon ends with the process
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            ready.put((failed, exc))

    threading.Thread(target=produce, name="lockguard-prefetch", daemon=True).start()
    while True:
        item = ready.get()
        if isinstance(item, tuple) and len(item) == 2 and item[0] is failed:
            raise RuntimeError("the input pipeline's prefetch thread failed") from item[1]
        yield item


def _data(ctx) -> None:
    d = gen.DATA
    (shape, flat), labels = gen.pipeline_data(ctx.seed)
    x = np.array(flat, dtype=np.float32).reshape(shape)
    y = np.array(labels, dtype=np.int32)
    per_epoch = len(labels) // d["batch"]
    shuffler = np.random.default_rng(ctx.seed)

    def batches() -> Iterator[Tuple[Tuple[Any, Any], List[int]]]:
        while True:  # an epoch per permutation
            order = shuffler.permutation(len(labels))
            for b in range(per_epoch):
                ids = order[b * d["batch"]:(b + 1) * d["batch"]]
                inputs = x[ids] * np.float32(d["scale"])  # the map step
                yield ((jax.device_put(inputs, _STATE["device"]),
                        jax.device_put(y[ids], _STATE["device"])), [int(i) for i in ids])

    params = {k: _to_jax(t) for k, t in gen.mlp_params(ctx.seed).items()}
    _, _, probe_t = gen.mlp_data(ctx.seed)
    probe = _to_jax(probe_t)
    train(ctx, params, lambda p, xb, yb: _cross_entropy(_mlp_forward(p, xb), yb),
          lambda p: _mlp_forward(p, probe), gen.MLP["lr"],
          batches=Batches(_prefetched(batches(), d["prefetch"]), per_epoch))


DP_DEVICES = gen.DATA_PARALLEL


def _dp(ctx) -> None:
    """jax.dp: gen.MLP's training jitted over DP_DEVICES devices, the batch split between them
    and the parameters replicated (NamedSharding over a 1-D mesh): XLA partitions the step and
    all-reduces the loss and gradients across the devices."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = [d for d in jax.devices() if d.platform == _STATE["device"].platform][:DP_DEVICES]
    if len(devices) < DP_DEVICES:
        raise RuntimeError(f"jax.dp needs {DP_DEVICES} {_STATE['device'].platform} devices, "
                           f"found {len(devices)}")
    mesh = Mesh(np.array(devices), ("data",))
    replicated, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(
        mesh, PartitionSpec("data"))

    def put(t: gen.Tensor, sharding: Any) -> Any:
        shape, flat = t
        return jax.device_put(np.array(flat, dtype=np.float32).reshape(shape), sharding)

    params = {k: put(t, replicated) for k, t in gen.mlp_params(ctx.seed).items()}
    x_t, labels, probe_t = gen.mlp_data(ctx.seed)
    inputs = (put(x_t, split), jax.device_put(np.array(labels, dtype=np.int32), split))
    probe = put(probe_t, replicated)
    ctx.result["fingerprint"]["distributed"] = {
        "devices": [str(d) for d in devices], "sharding": "batch over ('data',), params "
        "replicated"}
    train(ctx, params, lambda p, xb, yb: _cross_entropy(_mlp_forward(p, xb), yb),
          lambda p: _mlp_forward(p, probe), gen.MLP["lr"],
          batches=Batches(itertools.repeat((inputs, None))))


def _layer_norm(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    x = x.astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def _gpt_forward(p: Dict[str, Any], tokens: Any, bf16: bool) -> Any:
    c = gen.LM
    d, heads = c["d"], c["heads"]
    hd = d // heads
    cdt = jnp.bfloat16 if bf16 else jnp.float32

    def linear(a: Any, w: Any, b: Any = None) -> Any:
        out = a.astype(cdt) @ w.astype(cdt).T
        return out if b is None else out + b.astype(cdt)

    bsz, t = tokens.shape
    h = tap("emb", "Embedding", p["tok_emb"][tokens] + p["pos_emb"][:t])
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    for layer in range(c["layers"]):
        pre = f"l{layer}."
        a = tap(pre + "ln1", "LayerNorm", _layer_norm(h, p[pre + "ln1_w"], p[pre + "ln1_b"]), h)
        qkv = tap(pre + "qkv", "Linear", linear(a, p[pre + "qkv_w"], p[pre + "qkv_b"]), a)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q, k, v = (z.reshape(bsz, t, heads, hd).transpose(0, 2, 1, 3) for z in (q, k, v))
        scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd)
        scores = jnp.where(causal, scores.astype(jnp.float32), -jnp.inf)
        probs = jax.nn.softmax(scores, axis=-1)
        att = tap(pre + "attn", "Attention",
                  (probs.astype(cdt) @ v).transpose(0, 2, 1, 3).reshape(bsz, t, d), qkv)
        proj = tap(pre + "proj", "Linear", linear(att, p[pre + "proj_w"], p[pre + "proj_b"]),
                   att)
        h = h + proj.astype(jnp.float32)
        m = tap(pre + "ln2", "LayerNorm", _layer_norm(h, p[pre + "ln2_w"], p[pre + "ln2_b"]), h)
        f = tap(pre + "fc1", "Linear", linear(m, p[pre + "fc1_w"], p[pre + "fc1_b"]), m)
        g = tap(pre + "gelu", "GELU",
                jax.nn.gelu(f.astype(jnp.float32), approximate=False).astype(cdt), f)
        h = h + tap(pre + "fc2", "Linear", linear(g, p[pre + "fc2_w"], p[pre + "fc2_b"]),
                    g).astype(jnp.float32)
    n = tap("lnf", "LayerNorm", _layer_norm(h, p["lnf_w"], p["lnf_b"]), h)
    return tap("head", "Linear", linear(n, p["head_w"]), n)


def _lm(ctx, bf16: bool = False) -> None:
    c = gen.LM
    params = {k: _to_jax(t) for k, t in gen.lm_params(ctx.seed).items()}
    inputs, targets, probe = gen.lm_data(ctx.seed)
    x, y, pr = (jax.device_put(np.array(rows, dtype=np.int32), _STATE["device"])
                for rows in (inputs, targets, probe))
    train(ctx, params, lambda p: _cross_entropy(_gpt_forward(p, x, bf16), y),
          lambda p: _gpt_forward(p, pr, bf16), c["lr"], c["weight_decay"])
    if bf16:
        ctx.result["dtype"] = "bfloat16"


# --------------------------------------------------------------------------- cnn family

def train_with_state(ctx, params: Dict[str, Any], state: Dict[str, Any],
                     loss_fn: Callable[[Dict[str, Any], Dict[str, Any]], Any],
                     probe_fn: Callable[[Dict[str, Any], Dict[str, Any]], Any],
                     lr: float) -> None:
    """`train` for a model with state that the forward pass updates and Adam does not (the
    BatchNorm running statistics): loss_fn(params, state) returns (loss, new state), and
    probe_fn(params, state) the probe outputs. One jitted step; the digest covers the
    parameters, then the state, each in its given order."""
    traces = [0]
    order, state_order = list(params), list(state)

    def train_step(params, state, m, v, step_size, bc2_sqrt):
        traces[0] += 1  # runs only while jax traces the function
        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state)
        new_p, new_m, new_v = _adam_update(params, grads, m, v, step_size, bc2_sqrt, None)
        return new_p, new_state, new_m, new_v, loss, grads

    step_fn = jax.jit(train_step)
    m = {k: jnp.zeros_like(p) for k, p in params.items()}
    v = {k: jnp.zeros_like(p) for k, p in params.items()}
    for step in range(1, ctx.steps + 1):
        step_size, bc2_sqrt = (np.float32(x) for x in gen.adam_host_scalars(step, lr))
        start = time.perf_counter()
        if step - 1 == getattr(ctx, "locate_step", None):
            ctx.result["capture"] = capture(step - 1, ctx.scenario, {**params, **state},
                                            lambda p, s: loss_fn(p, s)[0], params, state)
        params, state, m, v, loss, grads = step_fn(params, state, m, v, step_size, bc2_sqrt)
        jax.block_until_ready((params, state, m, v, loss, grads))
        seconds = time.perf_counter() - start
        ctx.record_step(float(_host(loss)), global_norm(_host(g) for g in grads.values()),
                        seconds)
    ctx.set_outputs(*host_floats(_host(jax.jit(probe_fn)(params, state))))
    _record_params(ctx, {**{name: params[name] for name in order},
                         **{name: state[name] for name in state_order}})
    compile_info: Dict[str, Any] = {"traces": {"train_step": traces[0]}}
    if "train_step" in _STATE["compiles"]:
        compile_info["compilations"] = {"train_step": _STATE["compiles"]["train_step"]}
        compile_info["compile_s"] = _STATE["compile_s"]["train_step"]
    ctx.result["compile"] = compile_info


def _conv3x3(x: Any, w: Any, cdt: Any) -> Any:
    """torch's Conv2d(padding=1, bias=False) in its layouts: x NCHW, w OIHW."""
    return jax.lax.conv_general_dilated(x.astype(cdt), w.astype(cdt), (1, 1), ((1, 1), (1, 1)),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _batch_norm(x: Any, w: Any, b: Any, mean: Any, var: Any, training: bool
                ) -> Tuple[Any, Tuple[Any, Any]]:
    """torch.nn.BatchNorm2d over NCHW, computed in float32 and returned in x's dtype (torch's
    for a bfloat16 input): (output, (running mean, running variance) after this batch)."""
    c = gen.CNN
    xf = x.astype(jnp.float32)
    if training:
        mu = jnp.mean(xf, axis=(0, 2, 3))
        biased = jnp.mean(jnp.square(xf - mu[None, :, None, None]), axis=(0, 2, 3))
        n = xf.size // xf.shape[1]
        k = c["momentum"]
        new = ((1 - k) * mean + k * mu, (1 - k) * var + k * (biased * (n / (n - 1))))
    else:
        mu, biased, new = mean, var, (mean, var)
    per = (None, slice(None), None, None)
    y = (xf - mu[per]) * jax.lax.rsqrt(biased[per] + c["eps"]) * w[per] + b[per]
    return y.astype(x.dtype), new


def _cnn_forward(p: Dict[str, Any], s: Dict[str, Any], x: Any, training: bool,
                 bf16: bool) -> Tuple[Any, Dict[str, Any]]:
    """gen.CNN in torch's layouts: (logits, new running statistics). With bf16, torch.autocast's
    policy: convolutions and the linear layer in bfloat16, BatchNorm computed in float32 and
    returned in bfloat16, the rest in the dtype of its input."""
    cdt = jnp.bfloat16 if bf16 else jnp.float32
    new: Dict[str, Any] = {}

    def norm(h: Any, name: str) -> Any:
        out, (mean, var) = _batch_norm(h, p[name + "_w"], p[name + "_b"], s[name + "_mean"],
                                       s[name + "_var"], training)
        new[name + "_mean"], new[name + "_var"] = mean, var
        return tap(name, "BatchNorm2d", out, h)

    def conv(h: Any, name: str) -> Any:
        return tap(name, "Conv2d", _conv3x3(h, p[name + "_w"], cdt), h)

    h = jax.nn.relu(norm(conv(x, "conv1"), "bn1"))
    # A Python -inf with lax.max: jax recognises the max monoid (differentiable), as flax does.
    h = tap("pool", "MaxPool2d", jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2),
                                                       (1, 1, 2, 2), "VALID"), h)
    r = jax.nn.relu(norm(conv(h, "conv2"), "bn2"))
    h = jax.nn.relu(norm(conv(r, "conv3"), "bn3") + h)
    pooled = jnp.mean(h, axis=(2, 3))
    logits = tap("fc", "Linear", pooled.astype(cdt) @ p["fc_w"].astype(cdt).T
                 + p["fc_b"].astype(cdt), pooled)
    return logits, {name: new[name] for name in s}


def _cnn(ctx, bf16: bool = False) -> None:
    params = {k: _to_jax(t) for k, t in gen.cnn_params(ctx.seed).items()}
    state = {k: _to_jax(t) for k, t in gen.cnn_buffers().items()}
    x_t, labels, probe_t = gen.cnn_data(ctx.seed)
    x, probe = _to_jax(x_t), _to_jax(probe_t)
    y = jax.device_put(np.array(labels, dtype=np.int32), _STATE["device"])

    def loss_fn(p: Dict[str, Any], s: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
        logits, new = _cnn_forward(p, s, x, True, bf16)
        return _cross_entropy(logits, y), new

    train_with_state(ctx, params, state, loss_fn,
                     lambda p, s: _cnn_forward(p, s, probe, False, bf16)[0], gen.CNN["lr"])
    if bf16:
        ctx.result["dtype"] = "bfloat16"


SCENARIOS: Dict[str, Callable[[Any], None]] = {
    "jax.mlp": lambda ctx: _mlp(ctx, "gen"),
    "jax.lm": lambda ctx: _lm(ctx),
    "jax.lm.bf16": lambda ctx: _lm(ctx, bf16=True),
    "jax.rng": lambda ctx: _mlp(ctx, "jax"),
    "jax.data": _data,
    "jax.dp": _dp,
    "jax.cnn": lambda ctx: _cnn(ctx),
    "jax.cnn.bf16": lambda ctx: _cnn(ctx, bf16=True),
}


# --------------------------------------------------------------------------- user scripts

def _install_jit_counter() -> None:
    """Wrap jax.jit so that every function a user script jits counts its traces by name."""
    original = jax.jit
    if getattr(original, "_lockguard_counting", False):
        return
    wrapped: Dict[int, Tuple[Any, Any]] = {}
    traces = _STATE["user_traces"]

    def counting(fun: Any, name: str) -> Any:
        hit = wrapped.get(id(fun))
        if hit is not None and hit[0] is fun:
            return hit[1]

        @functools.wraps(fun)
        def traced(*args: Any, **kwargs: Any) -> Any:
            traces[name] = traces.get(name, 0) + 1
            return fun(*args, **kwargs)

        wrapped[id(fun)] = (fun, traced)
        return traced

    def jit(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:  # @jax.jit(static_argnums=...) as a decorator factory
            return lambda f: jit(f, *args, **kwargs)
        if not callable(fun):
            return original(fun, *args, **kwargs)
        name = getattr(fun, "__name__", None) or type(fun).__name__
        return original(counting(fun, name), *args, **kwargs)

    jit._lockguard_counting = True  # type: ignore[attr-defined]
    functools.update_wrapper(jit, original, updated=())
    jax.jit = jit


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) or isinstance(value, jax.Array)


def _to_host(value: Any) -> Any:
    return np.asarray(jax.device_get(value) if isinstance(value, jax.Array) else value)


def run_user(ctx, module) -> None:
    """Run a user script's run(steps, seed) with jit traces and compilations counted."""
    # The script was imported after setup(): re-seed the host RNGs it may use (jax's RNG is
    # explicit and needs no seeding).
    seed_host_rngs(ctx.seed, np)
    _STATE["compiles"].clear()
    _STATE["compile_s"].clear()
    run_script(ctx, module, host_array_adapter(_is_array, _to_host),
               sync=lambda: _try(jax.effects_barrier),
               capture=HostUserCapture(getattr(ctx, "locate_step", None), _to_host))
    traces = dict(_STATE["user_traces"])
    compile_info: Dict[str, Any] = {"traces": traces}
    compiles = {k: n for k, n in _STATE["compiles"].items() if k in traces}
    if compiles:
        compile_info["compilations"] = compiles
        compile_info["compile_s"] = math.fsum(_STATE["compile_s"][k] for k in compiles)
    ctx.result["compile"] = compile_info
