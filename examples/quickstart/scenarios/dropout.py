"""This project's own training step: a linear model with input dropout, trained by SGD.

Its dropout masks come from jax.random. jax 0.5.0 made `jax_threefry_partitionable` the default,
which changed the bits jax.random draws from a given key: the same code and seed train on other
masks and give another loss curve. lockguard calls `run(steps, seed)` in each lock's environment
and compares what it returns (the losses every step, and the trained weights bit for bit).
"""

import jax
import jax.numpy as jnp
import numpy as np


def run(steps, seed):
    rng = np.random.default_rng(seed)  # the data: numpy's generator, untouched by the upgrade
    x = jnp.asarray(rng.standard_normal((64, 8)), dtype=jnp.float32)
    y = jnp.asarray(x @ rng.standard_normal(8) + 0.1 * rng.standard_normal(64), dtype=jnp.float32)
    w = jnp.full(8, 0.1, jnp.float32)

    def loss_fn(w, key):
        keep = jax.random.bernoulli(key, 0.8, x.shape)
        pred = jnp.where(keep, x / 0.8, 0.0) @ w
        return jnp.mean((pred - y) ** 2)

    @jax.jit
    def step(w, key):
        loss, grad = jax.value_and_grad(loss_fn)(w, key)
        return w - 0.05 * grad, loss

    key = jax.random.PRNGKey(seed)
    losses = []
    for _ in range(steps):
        key, sub = jax.random.split(key)
        w, loss = step(w, sub)
        losses.append(loss)
    return {"losses": losses, "params": {"w": w}}
