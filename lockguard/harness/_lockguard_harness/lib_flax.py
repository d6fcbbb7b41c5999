"""The flax scenario: a model flax defines and initialises, trained with optax.

    flax.mlp   gen.MLP's shape (16 -> 32 -> tanh -> 4) as a flax.linen module of two nn.Dense
               layers, initialised by flax's defaults (lecun_normal kernels, zero biases) from
               jax.random.PRNGKey(seed), trained on gen.mlp_data by optax.adamw(lr 1e-2, optax's
               default weight decay) in one jitted step (loss, grad, optax update); probe:
               logits; the digest covers the parameters in flax's path order

linen, not nnx: linen's API has stayed the same across the flax releases teams pin, and its
initialisers and optax's update rules are what this guards. Runs inside the target environment
(stdlib, numpy, jax, flax, optax); imported by run.py after jax_.setup (jax's flags are set).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict

import flax
import jax
import numpy as np
import optax
from flax import linen as nn

from . import gen, jax_
from .common import global_norm, host_floats, record_libraries
from .locate_jax import capture, tap

VERSIONS = ("flax", "optax")


class MLP(nn.Module):
    hidden: int
    classes: int

    @nn.compact
    def __call__(self, x: Any) -> Any:
        # The taps (locate_jax.py) name the layers by flax's own names for them: a
        # localisation run records their outputs and gradients, and each Dense's float64
        # referee (its `layer`); otherwise they return what they are given. (flax's
        # capture_intermediates gives outputs only, no gradients.)
        first, second = nn.Dense(self.hidden), nn.Dense(self.classes)
        h = tap("Dense_0", "Dense", first(x), x, layer=first)
        t = tap("tanh", "tanh", nn.tanh(h), h)
        return tap("Dense_1", "Dense", second(t), t, layer=second)


def _flat(params: Any) -> Dict[str, Any]:
    """The parameters by their path ("Dense_0/kernel"), in sorted path order."""
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params), sep="/")
    return {name: flat[name] for name in sorted(flat)}


def _mlp(ctx) -> None:
    c = gen.MLP
    model = MLP(hidden=c["hidden"], classes=c["classes"])
    x_t, labels, probe_t = gen.mlp_data(ctx.seed)
    x, probe = jax_._to_jax(x_t), jax_._to_jax(probe_t)
    y = jax.device_put(np.array(labels, dtype=np.int32), jax_._STATE["device"])
    params = model.init(jax.random.PRNGKey(ctx.seed), x)["params"]
    tx = optax.adamw(c["lr"])
    opt_state = tx.init(params)
    traces = [0]

    def loss_fn(p: Any) -> Any:
        return jax_._cross_entropy(model.apply({"params": p}, x), y)

    def train_step(params: Any, opt_state: Any) -> Any:
        traces[0] += 1  # runs only while jax traces the function
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, grads

    step_fn = jax.jit(train_step)
    for step in range(ctx.steps):
        start = time.perf_counter()
        if step == getattr(ctx, "locate_step", None):
            # A localisation run records the step's layers as its weights enter it.
            ctx.result["capture"] = capture(step, "flax.linen MLP", _flat(params),
                                                 loss_fn, params)
        params, opt_state, loss, grads = step_fn(params, opt_state)
        jax.block_until_ready((params, opt_state, loss, grads))
        seconds = time.perf_counter() - start
        ctx.record_step(float(jax_._host(loss)),
                        global_norm(jax_._host(g) for g in _flat(grads).values()), seconds)
    out = jax.jit(lambda p: model.apply({"params": p}, probe))(params)
    ctx.set_outputs(*host_floats(jax_._host(out)))
    jax_._record_params(ctx, _flat(params))
    compile_info: Dict[str, Any] = {"traces": {"train_step": traces[0]}}
    if "train_step" in jax_._STATE["compiles"]:
        compile_info["compilations"] = {"train_step": jax_._STATE["compiles"]["train_step"]}
        compile_info["compile_s"] = jax_._STATE["compile_s"]["train_step"]
    ctx.result["compile"] = compile_info
    record_libraries(ctx, VERSIONS, api="flax.linen")


SCENARIOS: Dict[str, Callable[[Any], None]] = {
    "flax.mlp": _mlp,
}
