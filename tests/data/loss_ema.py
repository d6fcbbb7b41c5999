"""A user scenario: the smoothed loss a training loop logs, in float32 numpy.

NumPy 2 changed scalar promotion (NEP 50): `np.float32 * python float` used to give float64
(value-based casting) and now stays float32. Same code, different numbers — exactly the kind of
silent change lockguard exists to catch.
"""

import math

import numpy as np


def run(steps, seed):
    ema = np.float32(0.0)
    losses = []
    for step in range(steps):
        raw = np.float32(2.0 * math.exp(-0.05 * step) + 0.01 * math.sin(step + seed))
        ema = ema * np.float32(0.9) + 0.1 * raw  # 0.1 is a Python float: NEP 50 decides the dtype
        losses.append(float(ema))
    return {"losses": losses, "metrics": {"final_ema": float(ema)}}
