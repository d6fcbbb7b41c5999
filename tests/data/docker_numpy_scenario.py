"""A numpy user scenario for the docker backend's tests: a tiny least-squares fit by gradient
descent in float32, with a matmul (BLAS) and a reduction, so that a change of numpy's kernels
shows in the last bits of the losses. run(steps, seed) is the user-scenario interface."""

import numpy as np


def run(steps, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    true_w = rng.standard_normal((16, 1)).astype(np.float32)
    y = x @ true_w + np.float32(0.01) * rng.standard_normal((64, 1)).astype(np.float32)
    w = np.zeros((16, 1), dtype=np.float32)
    losses, grad_norms = [], []
    for _ in range(steps):
        err = x @ w - y
        losses.append(float(np.mean(err * err)))
        grad = (np.float32(2.0 / len(x)) * (x.T @ err)).astype(np.float32)
        grad_norms.append(float(np.linalg.norm(grad)))
        w = w - np.float32(0.1) * grad
    return {"losses": losses, "grad_norms": grad_norms, "outputs": w.ravel(),
            "params": {"w": w}}
