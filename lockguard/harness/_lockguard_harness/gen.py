"""The shared pure-Python generator of scenario data and initial weights.

Every harness module (torch_, jax_, tf_, numpy_) takes its inputs from here, never from numpy's or
the framework's RNG, so that:
  * the same maths gives the same first loss in every framework and every version, and
  * a numpy upgrade cannot masquerade as a framework drift.

Values are produced by SplitMix64 and rounded to float32 in pure Python (struct), so they are
bit-for-bit the same on every machine. Tensors are flat row-major lists with a shape; weight
matrices use the (out_features, in_features) layout of torch.nn.Linear. Frameworks with the
other convention (jax, keras) transpose on load.

Stdlib only: this file runs inside target environments.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Dict, List, Tuple

_MASK = (1 << 64) - 1

Tensor = Tuple[Tuple[int, ...], List[float]]  # (shape, flat row-major values)


def f32(x: float) -> float:
    """Round a Python float to the nearest float32, exactly as IEEE does."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class SplitMix64:
    """A tiny, well-known 64-bit generator (Steele et al.), seeded per named stream."""

    def __init__(self, seed: int, stream: str) -> None:
        digest = hashlib.sha256(f"{seed}/{stream}".encode()).digest()
        self.state = int.from_bytes(digest[:8], "little")

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def unit(self) -> float:
        """Uniform in [-1, 1) with 24 significant bits: exact in float32."""
        return ((self.next_u64() >> 40) / float(1 << 23)) - 1.0

    def below(self, n: int) -> int:
        return self.next_u64() % n


def uniform(seed: int, stream: str, shape: Tuple[int, ...], scale: float) -> Tensor:
    """Uniform(-scale, scale) values, rounded to float32."""
    rng = SplitMix64(seed, stream)
    n = math.prod(shape)
    return tuple(shape), [f32(rng.unit() * scale) for _ in range(n)]


def constant(shape: Tuple[int, ...], value: float) -> Tensor:
    return tuple(shape), [f32(value)] * math.prod(shape)


def integers(seed: int, stream: str, n: int, high: int) -> List[int]:
    rng = SplitMix64(seed, stream)
    return [rng.below(high) for _ in range(n)]


# --------------------------------------------------------------------------- optimiser
# Adam / AdamW as torch.optim's single-tensor implementation computes them; the modules that write
# the update out by hand (numpy_, jax_, tf_) take the constants and the host-side scalars here.

BETAS = (0.9, 0.999)
EPS = 1e-8


def adam_host_scalars(step: int, lr: float, betas: Tuple[float, float] = BETAS
                      ) -> Tuple[float, float]:
    """torch.optim.Adam's bias corrections for 1-based `step`, on the host in float64:
    (step_size = lr / (1 - beta1**step), sqrt(1 - beta2**step))."""
    step_size = lr / (1 - betas[0] ** step)
    return step_size, (1 - betas[1] ** step) ** 0.5


# --------------------------------------------------------------------------- mlp family
# A two-layer perceptron classifier: x -> Linear(16, 32) -> tanh -> Linear(32, 4) -> logits;
# loss = mean cross-entropy; optimiser Adam(lr=1e-2, betas=(0.9, 0.999), eps=1e-8), full batch.

MLP = {"in": 16, "hidden": 32, "classes": 4, "batch": 64, "probe": 8, "lr": 1e-2, "steps": 30}


def mlp_params(seed: int) -> Dict[str, Tensor]:
    i, h, c = MLP["in"], MLP["hidden"], MLP["classes"]
    return {
        "w1": uniform(seed, "mlp/w1", (h, i), 1.0 / math.sqrt(i)),
        "b1": uniform(seed, "mlp/b1", (h,), 1.0 / math.sqrt(i)),
        "w2": uniform(seed, "mlp/w2", (c, h), 1.0 / math.sqrt(h)),
        "b2": uniform(seed, "mlp/b2", (c,), 1.0 / math.sqrt(h)),
    }


def mlp_data(seed: int) -> Tuple[Tensor, List[int], Tensor]:
    """(inputs, integer labels, probe inputs). Labels follow a fixed rule so the task is learnable."""
    i, c, b = MLP["in"], MLP["classes"], MLP["batch"]
    shape, x = uniform(seed, "mlp/x", (b, i), 1.0)
    labels = []
    for r in range(b):
        row = x[r * i : (r + 1) * i]
        labels.append(int((row[0] + row[1] > 0)) * 2 + int(row[2] * row[3] > 0))
    assert max(labels) < c
    probe = uniform(seed, "mlp/probe", (MLP["probe"], i), 1.0)
    return (shape, x), labels, probe


# --------------------------------------------------------------------------- data pipelines
# The data scenarios (torch.data, tf.data, jax.data) train gen.MLP from a real input pipeline
# of the framework: DATA["samples"] labelled samples (mlp_data's labelling rule), shuffled each
# epoch by the framework's own seeded shuffler, mapped (x * scale, in float32, on the pipeline's
# workers), batched and prefetched. What they guard is the pipeline: the exact sample order of
# every batch is recorded (Context.record_batch), and a step's time includes fetching its batch.

DATA = {"samples": 96, "batch": 8, "epochs": 2, "workers": 2, "prefetch": 2, "scale": 0.5}
DATA_STEPS = DATA["samples"] // DATA["batch"] * DATA["epochs"]

# The data-parallel scenarios (torch.ddp, jax.dp, tf.dp): the MLP's batch split over this many
# workers (processes, host devices, logical CPUs).
DATA_PARALLEL = 2


def pipeline_data(seed: int) -> Tuple[Tensor, List[int]]:
    """(inputs, integer labels) of the data scenarios' dataset, before the pipeline's map."""
    i, n = MLP["in"], DATA["samples"]
    shape, x = uniform(seed, "data/x", (n, i), 1.0)
    labels = [int((x[r * i] + x[r * i + 1] > 0)) * 2 + int(x[r * i + 2] * x[r * i + 3] > 0)
              for r in range(n)]
    return (shape, x), labels


def order_digest(batches: List[List[int]]) -> str:
    """The sha256 of a run of batches' sample ids, in order (one per epoch in a result)."""
    return hashlib.sha256(";".join(",".join(str(i) for i in b) for b in batches)
                          .encode()).hexdigest()


# --------------------------------------------------------------------------- lm family
# A tiny causal transformer language model (GPT-style, pre-LayerNorm):
#   h = tok_emb[tokens] + pos_emb[:T]
#   per layer l: a = LN(h; ln1_w, ln1_b, eps=1e-5)
#                q, k, v = split(a @ qkv_w.T + qkv_b, 3)          (qkv_w: (3d, d), q first)
#                heads: reshape (B, T, H, d/H); scores = q k^T / sqrt(d/H); causal mask (-inf
#                above the diagonal); softmax; @ v; merge heads; @ proj_w.T + proj_b
#                h = h + attn
#                m = LN(h; ln2_w, ln2_b); m = gelu_erf(m @ fc1_w.T + fc1_b) @ fc2_w.T + fc2_b
#                h = h + m
#   logits = LN(h; lnf_w, lnf_b) @ head_w.T   (no bias, not tied)
# GELU is the exact erf form (jax.nn.gelu(approximate=False), keras approximate=False).
# loss = mean cross-entropy of next-token prediction over all B*T positions.
# Optimiser AdamW(lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), decoupled decay on
# every parameter (torch.optim.AdamW's default behaviour), full batch, the same batch each step.

LM = {
    "vocab": 64, "d": 32, "heads": 2, "layers": 2, "seq": 16, "batch": 8,
    "lr": 3e-3, "weight_decay": 0.01, "steps": 20, "probe_batch": 2,
}


def lm_params(seed: int) -> Dict[str, Tensor]:
    """All parameters in a fixed order (the order of the parameter digest)."""
    v, d, t = LM["vocab"], LM["d"], LM["seq"]
    s = 1.0 / math.sqrt(d)
    params: Dict[str, Tensor] = {
        "tok_emb": uniform(seed, "lm/tok_emb", (v, d), 0.5),
        "pos_emb": uniform(seed, "lm/pos_emb", (t, d), 0.5),
    }
    for layer in range(LM["layers"]):
        p = f"l{layer}."
        params[p + "ln1_w"] = constant((d,), 1.0)
        params[p + "ln1_b"] = constant((d,), 0.0)
        params[p + "qkv_w"] = uniform(seed, f"lm/{p}qkv_w", (3 * d, d), s)
        params[p + "qkv_b"] = constant((3 * d,), 0.0)
        params[p + "proj_w"] = uniform(seed, f"lm/{p}proj_w", (d, d), s)
        params[p + "proj_b"] = constant((d,), 0.0)
        params[p + "ln2_w"] = constant((d,), 1.0)
        params[p + "ln2_b"] = constant((d,), 0.0)
        params[p + "fc1_w"] = uniform(seed, f"lm/{p}fc1_w", (4 * d, d), s)
        params[p + "fc1_b"] = constant((4 * d,), 0.0)
        params[p + "fc2_w"] = uniform(seed, f"lm/{p}fc2_w", (d, 4 * d), 1.0 / math.sqrt(4 * d))
        params[p + "fc2_b"] = constant((d,), 0.0)
    params["lnf_w"] = constant((d,), 1.0)
    params["lnf_b"] = constant((d,), 0.0)
    params["head_w"] = uniform(seed, "lm/head_w", (v, d), s)
    return params


def lm_data(seed: int) -> Tuple[List[List[int]], List[List[int]], List[List[int]]]:
    """(inputs, targets, probe inputs) as lists of token rows.

    The token stream is a noisy repeating pattern, so there is something to learn in 20 steps.
    """
    v, t, b = LM["vocab"], LM["seq"], LM["batch"]
    noise = integers(seed, "lm/noise", b * (t + 1) + 64, 8)
    stream = [(3 * n + noise[n] // 6) % v for n in range(len(noise))]
    inputs = [stream[r * (t + 1) : r * (t + 1) + t] for r in range(b)]
    targets = [stream[r * (t + 1) + 1 : r * (t + 1) + t + 1] for r in range(b)]
    probe_tokens = integers(seed, "lm/probe", LM["probe_batch"] * t, v)
    probe = [probe_tokens[r * t : (r + 1) * t] for r in range(LM["probe_batch"])]
    return inputs, targets, probe


# --------------------------------------------------------------------------- cnn family
# A small residual convolutional classifier on synthetic images, in torch's layouts (images
# NCHW, conv weights (out, in, kh, kw)); frameworks with other layouts transpose on load:
#   stem:  x -> conv3x3(3 -> 8, padding 1, no bias) -> BatchNorm(bn1) -> ReLU -> max pool 2x2
#   block: h -> conv3x3(8 -> 8, pad 1) -> BN(bn2) -> ReLU -> conv3x3(8 -> 8, pad 1) -> BN(bn3)
#          -> + h -> ReLU
#   head:  global average pool -> Linear(8 -> 4) -> logits
# BatchNorm as torch.nn.BatchNorm2d computes it: in training, each channel normalised by the
# batch's mean and biased variance over (N, H, W), eps 1e-5; the running statistics updated as
# running = (1 - momentum) * running + momentum * batch statistic, momentum 0.1, the variance's
# unbiased (n / (n - 1)); in evaluation (the probe outputs), normalised by the running statistics.
# The running statistics follow the parameters in the digest (CNN_BUFFERS): what a framework
# release moves in BatchNorm shows in the digest and in the probe outputs.
# loss = mean cross-entropy; optimiser Adam(lr=3e-3, betas=(0.9, 0.999), eps=1e-8), full batch.

CNN = {"channels": 3, "size": 8, "width": 8, "classes": 4, "batch": 32, "probe": 4,
       "lr": 3e-3, "steps": 20, "eps": 1e-5, "momentum": 0.1}
CNN_NORMS = ("bn1", "bn2", "bn3")


def cnn_params(seed: int) -> Dict[str, Tensor]:
    """The trainable parameters in a fixed order (the digest's, before CNN_BUFFERS)."""
    c, w, k = CNN["channels"], CNN["width"], CNN["classes"]
    params: Dict[str, Tensor] = {}
    for i, (name, cin) in enumerate((("conv1", c), ("conv2", w), ("conv3", w))):
        params[name + "_w"] = uniform(seed, f"cnn/{name}_w", (w, cin, 3, 3),
                                      1.0 / math.sqrt(cin * 9))
        params[CNN_NORMS[i] + "_w"] = constant((w,), 1.0)
        params[CNN_NORMS[i] + "_b"] = constant((w,), 0.0)
    params["fc_w"] = uniform(seed, "cnn/fc_w", (k, w), 1.0 / math.sqrt(w))
    params["fc_b"] = uniform(seed, "cnn/fc_b", (k,), 1.0 / math.sqrt(w))
    return params


def cnn_buffers() -> Dict[str, Tensor]:
    """The BatchNorm running statistics at the start (mean 0, variance 1), in digest order."""
    w = CNN["width"]
    out: Dict[str, Tensor] = {}
    for norm in CNN_NORMS:
        out[norm + "_mean"] = constant((w,), 0.0)
        out[norm + "_var"] = constant((w,), 1.0)
    return out


def cnn_data(seed: int) -> Tuple[Tensor, List[int], Tensor]:
    """(images NCHW, integer labels, probe images). The label is learnable from the pixels: bit 1
    says whether channel 0 is brighter in the left half than in the right, bit 0 whether channel
    1 is brighter in the top half than in the bottom."""
    c, s, b = CNN["channels"], CNN["size"], CNN["batch"]
    shape, x = uniform(seed, "cnn/x", (b, c, s, s), 1.0)
    half = s // 2
    labels = []
    for n in range(b):
        def pixel(ch: int, row: int, col: int) -> float:
            return x[((n * c + ch) * s + row) * s + col]
        left = math.fsum(pixel(0, r, q) for r in range(s) for q in range(half))
        right = math.fsum(pixel(0, r, q) for r in range(s) for q in range(half, s))
        top = math.fsum(pixel(1, r, q) for r in range(half) for q in range(s))
        bottom = math.fsum(pixel(1, r, q) for r in range(half, s) for q in range(s))
        labels.append(int(left > right) * 2 + int(top > bottom))
    probe = uniform(seed, "cnn/probe", (CNN["probe"], c, s, s), 1.0)
    return (shape, x), labels, probe


# --------------------------------------------------------------------------- library models
# The model-library scenarios (harness lib_*.py) train a model that the library builds and
# initialises itself; only their inputs come from here: images (NCHW, 3 channels, values in
# [-1, 1)) with integer labels, and for the language models the lm family's tokens (lm_data).

IMAGES = {"size": 32, "batch": 8, "classes": 10, "probe": 4}


def image_data(seed: int) -> Tuple[Tensor, List[int], Tensor]:
    """(images NCHW, integer labels, probe images) for the library image classifiers."""
    c = IMAGES
    x = uniform(seed, "images/x", (c["batch"], 3, c["size"], c["size"]), 1.0)
    labels = integers(seed, "images/labels", c["batch"], c["classes"])
    probe = uniform(seed, "images/probe", (c["probe"], 3, c["size"], c["size"]), 1.0)
    return x, labels, probe
