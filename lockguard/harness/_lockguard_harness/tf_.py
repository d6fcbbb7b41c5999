"""The TensorFlow harness module: determinism, fingerprint, bundled scenarios and user scripts.

Runs inside the target environment: imports the stdlib, tensorflow (and the keras it resolves
tf.keras to), numpy and the shared generator. See run.py for the interface (NAME, setup,
SCENARIOS, run_user).

tensorflow is imported by setup(), not at the top of this module, so that the variables TF reads
at import (TF_DETERMINISTIC_OPS) are set from the run's arguments first. setup() records the
import time in timings.import_s (run.py only sees this module's stdlib-only import).

Bundled scenarios (sizes and hyper-parameters from gen.py; plain-TF weights are tf.Variables in
gen's (out, in) layout, a linear layer is matmul(x, W, transpose_b=True) + b):
    tf.mlp      gen.MLP, loss + gradient + hand-written Adam in one tf.function
    tf.mlp.xla  tf.mlp in tf.function(jit_compile=True) (XLA; TF raises rather than falls back)
    tf.keras    gen.MLP as a keras functional model (Input -> Dense(tanh) -> Dense), gen weights
                set into the Dense kernels (transposed), keras SparseCategoricalCrossentropy
                (from_logits) and keras.optimizers.Adam(1e-2, 0.9, 0.999, epsilon=1e-8) in a
                custom GradientTape loop inside tf.function: Keras' own optimizer and layers, so
                Keras upgrades show up here (Keras' Adam is not torch's: epsilon is added to
                sqrt(v) before bias correction; only the first loss is comparable across
                frameworks)
    tf.lm       gen.LM in plain TF ops (explicit causal mask + softmax, exact GELU, sparse softmax
                cross-entropy) with hand-written AdamW, in tf.function
    tf.rng      the mlp initialised by TensorFlow's RNGs: w1, b1 by tf.random.uniform under
                tf.random.set_seed(seed); w2, b2 by keras.initializers.RandomUniform under
                keras.utils.set_random_seed(seed) (nn.Linear's +-1/sqrt(fan_in) bounds); data
                from gen; trained like tf.mlp
    tf.cnn      gen.CNN on NHWC images (weights kept in gen's OIHW layout, transposed in the
                forward), BatchNorm written out as torch computes it, the running statistics
                tf.Variables assigned inside the step; probe in eval mode; trained like tf.mlp
    tf.cnn.xla  tf.cnn in tf.function(jit_compile=True)
    tf.cnn.bf16 tf.cnn with autocast's policy (bf16 convolutions and linear layer)
    tf.dp       gen.MLP under MirroredStrategy over 2 logical CPUs (2 GPUs where there are):
                each replica on half the batch, gradients all-reduced (MEAN) in replica context
    tf.data     gen.MLP trained like tf.mlp from a tf.data pipeline (gen.DATA): shuffle (seeded,
                reshuffled each epoch), map (parallel calls, deterministic), batch, repeat,
                prefetch, with Options.deterministic; every batch's sample ids are recorded
Adam / AdamW are written out like torch.optim's single-tensor implementation (see jax_.py): bias
corrections in float64 on the host each step, passed in as float32 scalar tensors, so the step
traces once.

Determinism (recorded in fingerprint["determinism"]): TF_DETERMINISTIC_OPS=1 before import,
tf.config.experimental.enable_op_determinism(), intra-op threads = --threads, inter-op threads =
1, tf.random.set_seed(seed). Bundled scenarios turn TensorFloat-32 off (TF enables it by default
on Ampere+ GPUs; torch's default matmul does not use it); user scripts keep TF's default. oneDNN is
left as the environment has it (TF_ENABLE_ONEDNN_OPTS) and recorded: it is part of what users run.
Device: --device cpu hides the GPUs; cuda uses /GPU:0 when TF sees one, else runs on the CPU and
records "cpu" (a device_fallback for lockguard); TF has no TPU path here (runs on the CPU). The
device recorded is read back from where a tensor actually landed.

Per step: loss (the float32 value as an exact Python float), global gradient norm before the
update (math.fsum of float64 squares, exact), step wall time (synchronised by reading the loss).
compile: {"traces": {"train_step": tracing count}, "xla": jit_compile}.

User scripts: the contract of userscript.py (run(steps, seed) returns losses or a dict with
"losses", "outputs", "grad_norms", "metrics", "params", "step_times"); arrays are tf.Tensors,
tf.Variables, numpy arrays and numpy scalars, params become numpy arrays on the host (np.asarray
of anything else) and are digested in their own dtype (bfloat16 widened to float32). setup()
wraps tf.function before the script is imported, so every tf.function the script (or keras'
model.fit) creates counts its traces by name, and "xla" says whether any traced function asked
for jit_compile.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import devices, gen
from .common import attempt as _try
from .common import (Batches, global_norm, host_floats, installed_version, le_bytes,
                     recorded_env, seed_host_rngs, sum_squares)
from .locate_tf import KerasUserCapture, capture, keras_chain, tap
from .userscript import host_array_adapter, run_script

NAME = "tensorflow"

# Filled by setup(): the framework is imported only after its environment variables are set.
tf: Any = None
np: Any = None

_STATE: Dict[str, Any] = {
    "device": "/CPU:0",      # where the bundled scenarios place their tensors
    "user_traces": {},       # user tf.function name -> traces
    "user_jit": set(),       # user tf.function names traced with jit_compile=True
}


# --------------------------------------------------------------------------- setup

def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def _device_class(device_string: str) -> str:
    kind = device_string.rsplit("/device:", 1)[-1].split(":", 1)[0].upper()
    return {"GPU": "cuda", "TPU": "tpu"}.get(kind, "cpu")


def setup(ctx) -> None:
    global tf, np
    os.environ["TF_DETERMINISTIC_OPS"] = "1"
    start = time.perf_counter()
    import numpy
    import tensorflow
    tf, np = tensorflow, numpy
    timings = ctx.result["timings"]
    timings["import_s"] = (timings.get("import_s") or 0.0) + time.perf_counter() - start

    # Threads and visible devices must be set before TF initialises its runtime (first op).
    tf.config.threading.set_intra_op_parallelism_threads(ctx.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if ctx.scenario == "tf.dp":
        # The data-parallel scenario's replicas on the CPU: the CPU split in DP_REPLICAS logical
        # devices (with GPUs the replicas are GPUs; without, a fallback still has its replicas).
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(DP_REPLICAS)])
    gpus = _try(lambda: tf.config.list_physical_devices("GPU"), []) or []
    if ctx.device != "cuda" and gpus:
        tf.config.set_visible_devices([], "GPU")
        gpus = []
    for gpu in gpus:
        _try(lambda: tf.config.experimental.set_memory_growth(gpu, True))
    op_determinism = False
    if hasattr(tf.config.experimental, "enable_op_determinism"):
        tf.config.experimental.enable_op_determinism()
        op_determinism = True
    if not ctx.script:
        tf.config.experimental.enable_tensor_float_32_execution(False)
    tf.random.set_seed(ctx.seed)

    wanted = "/GPU:0" if (ctx.device == "cuda" and gpus) else "/CPU:0"
    with tf.device(wanted):
        landed = tf.identity(tf.constant(0.0)).device
    _STATE["device"] = wanted
    cls = _device_class(landed)
    ctx.result["device"] = cls
    ctx.result["framework_version"] = tf.__version__
    name = "cpu"
    if cls == "cuda":
        details = _try(lambda: tf.config.experimental.get_device_details(gpus[0]), {}) or {}
        name = f"cuda:0 {details.get('device_name', 'GPU')}"
        ctx.result["fingerprint"]["gpu"] = {str(k): _plain(v) for k, v in details.items()}
    ctx.result["device_name"] = name

    _fingerprint(ctx, gpus, landed, op_determinism)
    if ctx.script:
        _install_function_counter()


def _fingerprint(ctx, gpus: list, landed: str, op_determinism: bool) -> None:
    """What the run ran on, beside its numbers: the device it landed on and why it fell back,
    TensorFlow's build, oneDNN and XLA, and the determinism settings in force."""
    cls = ctx.result["device"]
    fp = ctx.result["fingerprint"]
    fp["env"] = recorded_env()
    fp["device_expected"] = ctx.device
    fp["device_placed"] = landed
    if ctx.device == "cuda" and cls != "cuda":
        build = _try(lambda: tf.sysconfig.get_build_info(), {}) or {}
        fp["device_fallback"] = (
            "tensorflow is not a CUDA build (tensorflow[and-cuda] is)"
            if not build.get("is_cuda_build") else
            devices.cuda_missing() or "tensorflow sees no GPU (tf.config lists none)")
    elif ctx.device == "tpu":
        fp["device_fallback"] = "the tensorflow harness does not drive TPUs"
    fp["tensorflow"] = tf.__version__
    fp["tf_build"] = {str(k): _plain(v) for k, v in
                      dict(_try(tf.sysconfig.get_build_info, {}) or {}).items()}
    fp["tf_git_version"] = _try(lambda: tf.version.GIT_VERSION)
    fp["keras"] = installed_version("keras")
    fp["tf_keras"] = installed_version("tf-keras") or installed_version("tf_keras")
    fp["ml_dtypes"] = installed_version("ml_dtypes") or installed_version("ml-dtypes")
    fp["numpy"] = np.__version__
    fp["physical_gpus"] = len(gpus)
    port = _try(lambda: __import__("tensorflow.python.util._pywrap_util_port",
                                   fromlist=["_"]))
    fp["onednn"] = {
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "enabled": _try(lambda: bool(port.IsMklEnabled())),
    }
    fp["xla_built"] = _try(lambda: bool(port.IsBuiltWithXLA()))
    fp["determinism"] = {
        "TF_DETERMINISTIC_OPS": os.environ.get("TF_DETERMINISTIC_OPS"),
        "op_determinism": op_determinism,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "tensor_float_32": _try(lambda: bool(
            tf.config.experimental.tensor_float_32_execution_enabled())),
        "global_seed": ctx.seed,
    }


# --------------------------------------------------------------------------- helpers

def _const(t: gen.Tensor) -> Any:
    shape, flat = t
    return tf.constant(np.array(flat, dtype=np.float32).reshape(shape))


def _record_params(ctx, host: Dict[str, Any]) -> None:
    """host: {gen name: numpy array in gen's layout}, in gen's order."""
    ctx.set_params([(name, le_bytes(a.astype(np.float32))) for name, a in host.items()],
                   {name: math.sqrt(sum_squares(a)) for name, a in host.items()})


def _set_outputs(ctx, out: Any) -> None:
    ctx.set_outputs(*host_floats(np.asarray(out)))


def _dense_grad(g: Any) -> Any:
    # tf.gather's gradient is IndexedSlices; the optimiser maths wants the dense tensor.
    return tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g


def _cross_entropy(logits: Any, labels: Any) -> Any:
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


def _linear(a: Any, w: Any, b: Any = None) -> Any:
    """a (..., in) @ w.T (w: (out, in)) + b, over the flattened leading dimensions."""
    lead = tf.shape(a)[:-1]
    out = tf.matmul(tf.reshape(a, [-1, a.shape[-1]]), w, transpose_b=True)
    if b is not None:
        out = out + b
    return tf.reshape(out, tf.concat([lead, [w.shape[0]]], axis=0))


# --------------------------------------------------------------------------- optimiser

BETAS, EPS = gen.BETAS, gen.EPS


def train(ctx, params: Dict[str, Any], loss_fn: Callable[..., Any],
          probe_fn: Callable[[], Any], lr: float, weight_decay: Optional[float] = None,
          jit_compile: bool = False, batches: Optional[Batches] = None,
          mirrored: Optional[Tuple[Any, Any]] = None,
          state: Optional[Dict[str, Any]] = None) -> None:
    """The training loop of the plain-TF scenarios: one tf.function for loss, grads and Adam.

    params: {gen name: tf.Variable in gen's layout}, in gen's order; loss_fn/probe_fn close
    over them. `batches` (the data scenarios): each step's inputs, handed to loss_fn(*inputs)
    through the tf.function's arguments (one trace: the shapes never change); a step's time
    includes fetching its batch. `mirrored` (tf.dp): (strategy, per-replica inputs), params
    made in its scope: each replica runs loss_fn(its inputs), the gradients and the loss are
    all-reduced (MEAN) in replica context, and every replica applies the same update to its
    copy (the variables, Adam's included, aggregated ONLY_FIRST_REPLICA); what is recorded is
    the first replica's, equal on all. `state`: variables the loss assigns (BatchNorm's
    running statistics), for a localisation run's capture (locate_tf.py).
    """
    decay = None if weight_decay is None else 1 - lr * weight_decay
    names = list(params)
    variables = [params[n] for n in names]
    strategy, per_replica = mirrored if mirrored else (None, None)
    with strategy.scope() if strategy else contextlib.nullcontext():
        slot = {"aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA} if strategy else {}
        m = [tf.Variable(tf.zeros_like(v), **slot) for v in variables]
        v2 = [tf.Variable(tf.zeros_like(v), **slot) for v in variables]

    def train_step(step_size, bc2_sqrt, *inputs):
        with tf.GradientTape() as tape:
            loss = loss_fn(*inputs)
        grads = [_dense_grad(g) for g in tape.gradient(loss, variables)]
        if strategy is not None:
            replica = tf.distribute.get_replica_context()
            grads = replica.all_reduce(tf.distribute.ReduceOp.MEAN, grads)
            loss = replica.all_reduce(tf.distribute.ReduceOp.MEAN, loss)
        _adam_update(variables, m, v2, grads, step_size, bc2_sqrt, decay)
        return loss, grads

    def mirrored_step(step_size, bc2_sqrt):
        loss, grads = strategy.run(train_step, args=(step_size, bc2_sqrt, per_replica))
        first = strategy.experimental_local_results
        return first(loss)[0], [first(g)[0] for g in grads]

    step_fn = tf.function(mirrored_step if strategy else train_step, jit_compile=jit_compile)
    for step in range(1, ctx.steps + 1):
        step_size, bc2_sqrt = (tf.constant(np.float32(v))
                               for v in gen.adam_host_scalars(step, lr))
        start = time.perf_counter()
        inputs, ids = next(batches.iterator) if batches is not None else ((), None)
        if step - 1 == getattr(ctx, "locate_step", None):
            # A localisation run records the step's layers as its weights enter it (a
            # mirrored step's replicas: its variables only).
            ctx.result["capture"] = capture(
                step - 1, ctx.scenario, {**params, **(state or {})},
                None if strategy else (lambda: loss_fn(*inputs)), list((state or {}).values()))
        loss, grads = step_fn(step_size, bc2_sqrt, *inputs)
        value = float(loss.numpy())  # waits for the step
        seconds = time.perf_counter() - start
        ctx.record_step(value, global_norm([g.numpy() for g in grads]), seconds)
        if ids is not None:
            ctx.record_batch(ids, batches.per_epoch)
    _set_outputs(ctx, probe_fn())
    _record_params(ctx, {n: p.numpy() for n, p in params.items()})
    ctx.result["compile"] = {"traces": {"train_step": _tracing_count(step_fn)},
                             "xla": bool(jit_compile)}


def _adam_update(variables: List[Any], m: List[Any], v: List[Any], grads: List[Any],
                 step_size: Any, bc2_sqrt: Any, decay: Optional[float]) -> None:
    b1, b2 = BETAS
    for p, mv, vv, g in zip(variables, m, v, grads):
        if decay is not None:
            p.assign(p * decay)  # AdamW: decoupled decay before the Adam step
        mn = mv + (1 - b1) * (g - mv)              # exp_avg.lerp_(g, 1 - b1)
        vn = vv * b2 + (1 - b2) * g * g            # mul_(b2).addcmul_(g, g, 1 - b2)
        denom = tf.sqrt(vn) / bc2_sqrt + EPS
        p.assign(p + (-step_size * mn) / denom)    # addcdiv_(m, denom, -step_size)
        mv.assign(mn)
        vv.assign(vn)


def _tracing_count(fn: Any) -> int:
    """Traces of a tf.function (its experimental_get_tracing_count()); -1 when TF cannot say."""
    return int(_try(fn.experimental_get_tracing_count, -1))


# --------------------------------------------------------------------------- scenarios

def _mlp_data(seed: int) -> Tuple[Any, Any, Any]:
    x_t, labels, probe_t = gen.mlp_data(seed)
    return _const(x_t), tf.constant(np.array(labels, dtype=np.int32)), _const(probe_t)


def _mlp_forward(p: Dict[str, Any], x: Any) -> Any:
    # tap: a layer's output, recorded by a localisation run only (locate_tf.py)
    z = tap("fc1", "Linear", _linear(x, p["w1"], p["b1"]), x)
    h = tap("tanh", "Tanh", tf.tanh(z), z)
    return tap("fc2", "Linear", _linear(h, p["w2"], p["b2"]), h)


def _rng_mlp_params(seed: int) -> Dict[str, Any]:
    c = gen.MLP
    keras = tf.keras
    keras.utils.set_random_seed(seed)  # python, numpy, tf.random and keras' own seed generator
    tf.random.set_seed(seed)
    s1, s2 = 1.0 / math.sqrt(c["in"]), 1.0 / math.sqrt(c["hidden"])
    w1 = tf.random.uniform((c["hidden"], c["in"]), -s1, s1, dtype=tf.float32)
    b1 = tf.random.uniform((c["hidden"],), -s1, s1, dtype=tf.float32)
    init = keras.initializers.RandomUniform(minval=-s2, maxval=s2)
    w2 = tf.convert_to_tensor(init((c["classes"], c["hidden"]), dtype="float32"))
    b2 = tf.convert_to_tensor(init((c["classes"],), dtype="float32"))
    return {"w1": w1, "b1": b1, "w2": w2, "b2": b2}


def _mlp(ctx, init: str = "gen", jit_compile: bool = False) -> None:
    with tf.device(_STATE["device"]):
        if init == "tf":
            values = _rng_mlp_params(ctx.seed)
        else:
            values = {k: _const(t) for k, t in gen.mlp_params(ctx.seed).items()}
        params = {k: tf.Variable(v, name=k) for k, v in values.items()}
        x, y, probe = _mlp_data(ctx.seed)
        train(ctx, params, lambda: _cross_entropy(_mlp_forward(params, x), y),
              lambda: _mlp_forward(params, probe), gen.MLP["lr"], jit_compile=jit_compile)


def _data(ctx) -> None:
    d = gen.DATA
    (shape, flat), labels = gen.pipeline_data(ctx.seed)
    x = np.array(flat, dtype=np.float32).reshape(shape)
    ids = np.arange(len(labels), dtype=np.int64)
    scale = np.float32(d["scale"])
    pipeline = (tf.data.Dataset.from_tensor_slices((x, np.array(labels, dtype=np.int32), ids))
                .shuffle(len(labels), seed=ctx.seed, reshuffle_each_iteration=True)
                .map(lambda a, b, i: (a * scale, b, i), num_parallel_calls=d["workers"],
                     deterministic=True)
                .batch(d["batch"], drop_remainder=True)
                .repeat()
                .prefetch(d["prefetch"]))
    options = tf.data.Options()
    options.deterministic = True
    pipeline = pipeline.with_options(options)

    def batches() -> Iterator[Tuple[Tuple[Any, Any], List[int]]]:
        for xb, yb, idb in pipeline:
            yield (xb, yb), [int(i) for i in idb.numpy()]

    with tf.device(_STATE["device"]):
        params = {k: tf.Variable(_const(t), name=k) for k, t in gen.mlp_params(ctx.seed).items()}
        _, _, probe = _mlp_data(ctx.seed)
        train(ctx, params, lambda xb, yb: _cross_entropy(_mlp_forward(params, xb), yb),
              lambda: _mlp_forward(params, probe), gen.MLP["lr"],
              batches=Batches(batches(), len(labels) // d["batch"]))


DP_REPLICAS = gen.DATA_PARALLEL


def _dp(ctx) -> None:
    """tf.dp: gen.MLP under tf.distribute.MirroredStrategy over DP_REPLICAS devices (logical
    CPUs on the CPU, GPUs on cuda), each replica on its share of the batch, trained by `train`
    (mirrored)."""
    kind = "GPU" if _STATE["device"].startswith("/GPU") else "CPU"
    devices = [d.name for d in tf.config.list_logical_devices(kind)][:DP_REPLICAS]
    if len(devices) < DP_REPLICAS:
        raise RuntimeError(f"tf.dp needs {DP_REPLICAS} {kind} devices, found {len(devices)}")
    strategy = tf.distribute.MirroredStrategy(devices)
    x_t, labels, probe_t = gen.mlp_data(ctx.seed)
    x = np.array(x_t[1], dtype=np.float32).reshape(x_t[0])
    y = np.array(labels, dtype=np.int32)
    share = len(labels) // DP_REPLICAS
    with strategy.scope():
        params = {k: tf.Variable(_const(t), name=k,
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                  for k, t in gen.mlp_params(ctx.seed).items()}
    shards = strategy.experimental_distribute_values_from_function(
        lambda replica: (tf.constant(x[replica.replica_id_in_sync_group * share:][:share]),
                         tf.constant(y[replica.replica_id_in_sync_group * share:][:share])))

    def probe() -> Any:
        with tf.device(_STATE["device"]):
            return _mlp_forward({k: tf.convert_to_tensor(p) for k, p in params.items()},
                                _const(probe_t))

    train(ctx, params, lambda inputs: _cross_entropy(_mlp_forward(params, inputs[0]),
                                                     inputs[1]),
          probe, gen.MLP["lr"], mirrored=(strategy, shards))
    ctx.result["fingerprint"]["distributed"] = {
        "strategy": "MirroredStrategy", "devices": devices,
        # what the strategy chose to all-reduce with (a private attribute: best effort)
        "cross_device_ops": _try(lambda: type(strategy.extended._cross_device_ops).__name__)}


def _keras(ctx) -> None:
    keras = tf.keras
    c = gen.MLP
    with tf.device(_STATE["device"]):
        inputs = keras.Input(shape=(c["in"],), dtype="float32")
        dense1 = keras.layers.Dense(c["hidden"], activation="tanh", name="dense1")
        dense2 = keras.layers.Dense(c["classes"], name="dense2")
        model = keras.Model(inputs, dense2(dense1(inputs)))
        g = gen.mlp_params(ctx.seed)
        host = {k: np.array(t[1], dtype=np.float32).reshape(t[0]) for k, t in g.items()}
        dense1.set_weights([host["w1"].T, host["b1"]])
        dense2.set_weights([host["w2"].T, host["b2"]])
        loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.optimizers.Adam(learning_rate=c["lr"], beta_1=BETAS[0],
                                          beta_2=BETAS[1], epsilon=EPS)
        variables = model.trainable_variables
        if hasattr(optimizer, "build"):
            optimizer.build(variables)
        x, y, probe = _mlp_data(ctx.seed)

        @tf.function
        def train_step():
            with tf.GradientTape() as tape:
                loss = loss_obj(y, model(x, training=True))
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables))
            return loss, grads

        for step in range(ctx.steps):
            start = time.perf_counter()
            if step == getattr(ctx, "locate_step", None):
                # A localisation run records the step layer by layer as its weights enter it.
                ctx.result["capture"] = capture(
                    step, "keras.Model", {str(getattr(v, "path", None) or v.name): v
                                          for v in model.weights},
                    lambda: loss_obj(y, keras_chain(model, x)), [])
            loss, grads = train_step()
            value = float(loss.numpy())  # waits for the step
            seconds = time.perf_counter() - start
            ctx.record_step(value, global_norm([gr.numpy() for gr in grads]), seconds)
        _set_outputs(ctx, model(probe, training=False))
        k1, bias1 = dense1.get_weights()
        k2, bias2 = dense2.get_weights()
        _record_params(ctx, {"w1": k1.T, "b1": bias1, "w2": k2.T, "b2": bias2})
    ctx.result["compile"] = {"traces": {"train_step": _tracing_count(train_step)}, "xla": False}
    ctx.result["fingerprint"]["keras_runtime"] = {
        "module": getattr(keras, "__name__", None),
        "version": getattr(keras, "__version__", None),
        "backend": _try(lambda: keras.backend.backend()),
    }


def _layer_norm(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + eps) * w + b


def _gpt_forward(p: Dict[str, Any], tokens: Any) -> Any:
    c = gen.LM
    d, heads = c["d"], c["heads"]
    hd = d // heads
    bsz, t = tokens.shape
    h = tap("emb", "Embedding", tf.gather(p["tok_emb"], tokens) + p["pos_emb"][:t])
    causal = tf.cast(tf.linalg.band_part(tf.ones((t, t)), -1, 0), tf.bool)
    neg_inf = tf.fill((t, t), float("-inf"))
    for layer in range(c["layers"]):
        pre = f"l{layer}."
        a = tap(pre + "ln1", "LayerNorm", _layer_norm(h, p[pre + "ln1_w"], p[pre + "ln1_b"]), h)
        qkv = tap(pre + "qkv", "Linear", _linear(a, p[pre + "qkv_w"], p[pre + "qkv_b"]), a)
        q, k, v = tf.split(qkv, 3, axis=-1)
        q, k, v = (tf.transpose(tf.reshape(z, (bsz, t, heads, hd)), (0, 2, 1, 3))
                   for z in (q, k, v))
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(hd)
        probs = tf.nn.softmax(tf.where(causal, scores, neg_inf), axis=-1)
        att = tap(pre + "attn", "Attention", tf.reshape(
            tf.transpose(tf.matmul(probs, v), (0, 2, 1, 3)), (bsz, t, d)), qkv)
        h = h + tap(pre + "proj", "Linear", _linear(att, p[pre + "proj_w"], p[pre + "proj_b"]),
                    att)
        m = tap(pre + "ln2", "LayerNorm", _layer_norm(h, p[pre + "ln2_w"], p[pre + "ln2_b"]), h)
        f = tap(pre + "fc1", "Linear", _linear(m, p[pre + "fc1_w"], p[pre + "fc1_b"]), m)
        g = tap(pre + "gelu", "GELU", tf.nn.gelu(f, approximate=False), f)
        h = h + tap(pre + "fc2", "Linear", _linear(g, p[pre + "fc2_w"], p[pre + "fc2_b"]), g)
    n = tap("lnf", "LayerNorm", _layer_norm(h, p["lnf_w"], p["lnf_b"]), h)
    return tap("head", "Linear", _linear(n, p["head_w"]), n)


def _lm(ctx) -> None:
    c = gen.LM
    with tf.device(_STATE["device"]):
        params = {k: tf.Variable(_const(t), name=k.replace(".", "_"))
                  for k, t in gen.lm_params(ctx.seed).items()}
        inputs, targets, probe = gen.lm_data(ctx.seed)
        x = tf.constant(np.array(inputs, dtype=np.int32))
        y = tf.constant(np.array(targets, dtype=np.int32).reshape(-1))
        pr = tf.constant(np.array(probe, dtype=np.int32))
        train(ctx, params,
              lambda: _cross_entropy(tf.reshape(_gpt_forward(params, x), (-1, c["vocab"])), y),
              lambda: _gpt_forward(params, pr), c["lr"], c["weight_decay"])


# --------------------------------------------------------------------------- cnn family

def _batch_norm(x: Any, w: Any, b: Any, mean: Any, var: Any, training: bool) -> Any:
    """torch.nn.BatchNorm2d over NHWC in float32, returned in x's dtype; in training the
    running statistics (tf.Variables `mean`, `var`) are updated as torch updates them."""
    c = gen.CNN
    xf = tf.cast(x, tf.float32)
    if training:
        mu = tf.reduce_mean(xf, axis=(0, 1, 2))
        biased = tf.reduce_mean(tf.square(xf - mu), axis=(0, 1, 2))
        n = int(x.shape[0] * x.shape[1] * x.shape[2])
        k = c["momentum"]
        mean.assign((1 - k) * mean + k * mu)
        var.assign((1 - k) * var + k * (biased * (n / (n - 1))))
    else:
        mu, biased = mean, var
    return tf.cast((xf - mu) * tf.math.rsqrt(biased + c["eps"]) * w + b, x.dtype)


def _cnn_forward(p: Dict[str, Any], s: Dict[str, Any], x: Any, training: bool,
                 bf16: bool = False) -> Any:
    """gen.CNN on NHWC images (TF's CPU convolutions take no NCHW); the weights stay in gen's
    OIHW layout and are transposed to HWIO here, so the digest is over gen's layout. With bf16,
    torch.autocast's policy written out (as jax_.py does): convolutions and the linear layer
    in bfloat16, BatchNorm and the average pool computed in float32 and rounded to bfloat16,
    ReLU, max pool and the residual add in bfloat16."""
    cdt = tf.bfloat16 if bf16 else tf.float32

    def conv(h: Any, name: str) -> Any:
        return tap(name, "Conv2d", tf.nn.conv2d(
            tf.cast(h, cdt), tf.cast(tf.transpose(p[name + "_w"], (2, 3, 1, 0)), cdt),
            strides=1, padding="SAME"), h)

    def norm(h: Any, name: str) -> Any:
        return tap(name, "BatchNorm2d", _batch_norm(h, p[name + "_w"], p[name + "_b"],
                                                    s[name + "_mean"], s[name + "_var"],
                                                    training), h)

    h = tf.nn.relu(norm(conv(x, "conv1"), "bn1"))
    # Max pool 2x2 as a reshape and reduce_max: with op determinism on (setup), XLA refuses
    # MaxPool's gradient ("GPU MaxPool gradient ops do not yet have a deterministic XLA
    # implementation", TF 2.21, on the CPU too), and both twins must run the same ops.
    n, height, width, ch = h.shape
    h = tf.reduce_max(tf.reshape(h, (n, height // 2, 2, width // 2, 2, ch)), axis=(2, 4))
    r = tf.nn.relu(norm(conv(h, "conv2"), "bn2"))
    h = tf.nn.relu(norm(conv(r, "conv3"), "bn3") + h)
    pooled = tf.cast(tf.reduce_mean(tf.cast(h, tf.float32), axis=(1, 2)), cdt)
    return tap("fc", "Linear", _linear(pooled, tf.cast(p["fc_w"], cdt), tf.cast(p["fc_b"], cdt)),
               pooled)


def _cnn(ctx, jit_compile: bool = False, bf16: bool = False) -> None:
    """gen.CNN trained by `train` (train mode: batch statistics, running statistics updated
    inside the step); the probe in eval mode; the digest covers the running statistics after
    the parameters."""
    with tf.device(_STATE["device"]):
        params = {k: tf.Variable(_const(t), name=k) for k, t in gen.cnn_params(ctx.seed).items()}
        state = {k: tf.Variable(_const(t), name=k, trainable=False)
                 for k, t in gen.cnn_buffers().items()}
        x_t, labels, probe_t = gen.cnn_data(ctx.seed)
        x = tf.transpose(_const(x_t), (0, 2, 3, 1))
        probe = tf.transpose(_const(probe_t), (0, 2, 3, 1))
        y = tf.constant(np.array(labels, dtype=np.int32))
        train(ctx, params,
              lambda: _cross_entropy(tf.cast(_cnn_forward(params, state, x, True, bf16),
                                             tf.float32), y),
              lambda: tf.cast(_cnn_forward(params, state, probe, False, bf16), tf.float32),
              gen.CNN["lr"], jit_compile=jit_compile, state=state)
        _record_params(ctx, {**{n: v.numpy() for n, v in params.items()},
                             **{n: v.numpy() for n, v in state.items()}})
    if bf16:
        ctx.result["dtype"] = "bfloat16"


SCENARIOS: Dict[str, Callable[[Any], None]] = {
    "tf.mlp": lambda ctx: _mlp(ctx, "gen"),
    "tf.mlp.xla": lambda ctx: _mlp(ctx, "gen", jit_compile=True),
    "tf.keras": _keras,
    "tf.lm": _lm,
    "tf.rng": lambda ctx: _mlp(ctx, "tf"),
    "tf.data": _data,
    "tf.dp": _dp,
    "tf.cnn": lambda ctx: _cnn(ctx),
    "tf.cnn.xla": lambda ctx: _cnn(ctx, jit_compile=True),
    "tf.cnn.bf16": lambda ctx: _cnn(ctx, bf16=True),
}


# --------------------------------------------------------------------------- user scripts

def _install_function_counter() -> None:
    """Wrap tf.function so that every function created afterwards counts its traces by name.

    The count is kept by a wrapper around the Python function (TF runs the Python body only
    while tracing), not read from experimental_get_tracing_count(): a tf.function defined in a
    class body is traced through per-instance copies that die with their instance, often
    before run() returns. (Under tf.config.run_functions_eagerly(True) every call runs the
    body, and so counts: an eager fallback shows as many traces.)
    """
    original = tf.function
    if getattr(original, "_lockguard_counting", False):
        return
    traces: Dict[str, int] = _STATE["user_traces"]
    jitted: set = _STATE["user_jit"]

    def function(func: Any = None, *args: Any, **kwargs: Any) -> Any:
        if func is None:  # @tf.function(jit_compile=True) as a decorator factory
            return lambda f: function(f, *args, **kwargs)
        if not callable(func):
            return original(func, *args, **kwargs)
        name = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
                   or type(func).__name__)
        jit = kwargs.get("jit_compile", args[2] if len(args) > 2 else None)
        if jit is None:
            jit = kwargs.get("experimental_compile")

        @functools.wraps(func)
        def traced(*a: Any, **k: Any) -> Any:
            traces[name] = traces.get(name, 0) + 1
            if jit:
                jitted.add(name)
            return func(*a, **k)

        return original(traced, *args, **kwargs)

    function._lockguard_counting = True  # type: ignore[attr-defined]
    functools.update_wrapper(function, original, updated=())
    tf.function = function


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic, tf.Tensor, tf.Variable))


def _to_host(value: Any) -> Any:
    return np.asarray(value.numpy() if isinstance(value, (tf.Tensor, tf.Variable)) else value)


def run_user(ctx, module) -> None:
    """Run a user script's run(steps, seed) with its tf.functions' tracing counted."""
    # The script was imported after setup(): re-seed so its import cannot shift the streams.
    tf.random.set_seed(ctx.seed)
    seed_host_rngs(ctx.seed, np)
    run_script(ctx, module, host_array_adapter(_is_array, _to_host),
               capture=KerasUserCapture(getattr(ctx, "locate_step", None), _to_host))
    ctx.result["compile"] = {"traces": dict(_STATE["user_traces"]),
                             "xla": bool(_STATE["user_jit"])}
