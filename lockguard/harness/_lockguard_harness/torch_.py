"""The PyTorch harness module: determinism, fingerprint, bundled scenarios and user scripts.

Runs inside the target environment: imports the stdlib, torch, the shared generator and, only if
it is installed, numpy. See run.py for the interface (NAME, setup, SCENARIOS, run_user).

Bundled scenarios (sizes and hyper-parameters from gen.py):
    torch.mlp       gen.MLP with nn.Linear + torch.optim.Adam, initial weights from gen
    torch.lm        gen.LM (pre-LN GPT) with nn.LayerNorm, exact GELU, AdamW; the attention uses
                    F.scaled_dot_product_attention(is_causal=True) where torch has it (what users
                    call, and what upgrades change), else the explicit matmul + mask + softmax;
                    fingerprint["torch"]["attention"] says which
    torch.lm.bf16   torch.lm under torch.autocast(<device>, dtype=torch.bfloat16); dtype "bfloat16"
    torch.rng       the mlp initialised by torch's own RNG (manual_seed + nn.Linear's default
                    init), to catch RNG stream changes; data still from gen
    torch.data      gen.MLP trained from a torch DataLoader (gen.DATA: seeded RandomSampler,
                    worker processes, a collate step); every batch's sample ids are recorded
    torch.ddp       gen.MLP under DistributedDataParallel, 2 processes (a spawned rank), each on
                    half the batch: gloo on the CPU, NCCL on 2 GPUs; the all-reduce timed
                    through DDP's default hook
    torch.cnn       gen.CNN (conv, nn.BatchNorm2d, ReLU, max pool, a residual block, global average
                    pool, nn.Linear), Adam; trained in train mode, probed in eval mode (the running
                    statistics), the running statistics in the digest after the parameters
    torch.cnn.bf16  torch.cnn under torch.autocast(<device>, dtype=torch.bfloat16)
    torch.mlp.compile, torch.lm.compile, torch.cnn.compile
                    the twins above trained through torch.compile(model) (default backend,
                    inductor): the compiled module runs every training step, the optimiser and
                    the digest keep the original parameters, and the probe batch goes through
                    the eager module (one compiled graph pair per scenario, no extra inference
                    compile). After the compiled run the same process trains the eager twin and
                    an fp64 eager twin and stores PyTorch CI's accuracy verdict in
                    compile["accuracy"] (compile_torch.accuracy): the miscompile evidence.
Every scenario is a model builder plus a loss function handed to one training loop (`train`).
A compiled variant is one more SCENARIOS entry passing `wrap`: the wrapped model runs.

Compile diagnostics (every run, bundled or user script): compile_torch.RECORDER replaces
torch.compile in this process in setup(), before a user script is imported, so the script's own
torch.compile calls are counted too; result["compile"] holds what it saw (None for a run that
compiled nothing): graphs, unique graphs, graph breaks with normalised reasons, recompiles and
their guard failures, eager fallbacks, the backend used and the compile time.

User scripts: run(steps, seed) returns losses or a dict of losses, outputs, grad_norms, metrics,
params, step_times (the contract and its checks: userscript.py); tensors, numpy arrays and
numbers are accepted, and params are digested as torch tensors (other values through
torch.as_tensor), in the tensor's own dtype.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import statistics
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

try:
    # torch.optim's first optimiser imports torch._dynamo (for its disable decorator): a second
    # of framework import that every training through torch.optim pays. Imported here, it is
    # counted where it belongs, in timings.import_s, not in the run's own fixed cost.
    import torch._dynamo  # noqa: F401
except ImportError:  # torch < 2
    pass

from . import devices, gen
from .common import Batches, seed_host_rngs
from .common import attempt as _try
from .compile_torch import RECORDER, accuracy
from .locate_torch import Capture, TorchUserCapture
from .userscript import Adapter, UserResultError, describe, host_array_adapter, run_script

try:  # only to accept numpy arrays from user scripts; never required
    import numpy
except ImportError:  # pragma: no cover - depends on the target environment
    numpy = None

NAME = "torch"

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


# --------------------------------------------------------------------------- setup

def _choose_device(ctx) -> Tuple[str, Optional[str]]:
    """(device class to use, why the expected one is not used or None)."""
    if ctx.device == "cuda":
        if _try(torch.cuda.is_available, False):
            return "cuda", None
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return "cpu", "torch is a CPU-only build (torch.version.cuda is None)"
        return "cpu", (devices.cuda_missing()
                       or "torch.cuda.is_available() is False (no visible GPU or driver)")
    if ctx.device == "tpu":
        return "cpu", "the torch harness does not drive TPUs (no torch_xla support)"
    return "cpu", None


def _build_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {}
    parallel = _try(torch.__config__.parallel_info, "") or ""
    # The library-identifying lines (backend, OpenMP, MKL, oneDNN); thread counts are recorded
    # separately, and the environment-variable lines duplicate fingerprint["env"].
    lines = []
    for line in parallel.splitlines():
        if not line.strip() or line.startswith((" ", "\t")) or line.endswith(":"):
            continue
        if "hardware_concurrency" in line:
            continue
        lines.append(line.strip())
    info["parallel"] = lines
    show = _try(torch.__config__.show, "") or ""
    match = re.search(r"Build settings: (.*)", show)
    if match:
        settings = dict(re.findall(r"(\w+)=([^,]*)", match.group(1)))
        wanted = ("BLAS_INFO", "LAPACK_INFO", "BUILD_TYPE", "CUDA_VERSION", "CUDNN_VERSION",
                  "USE_CUDA", "USE_CUDNN", "USE_MKL", "USE_MKLDNN", "USE_OPENMP", "USE_ROCM",
                  "COMMIT_SHA")
        info["build"] = {k: settings[k].strip() for k in wanted if k in settings}
    return info


def _determinism_flags() -> Dict[str, Any]:
    cuda_matmul = torch.backends.cuda.matmul
    cudnn = torch.backends.cudnn
    return {
        "deterministic_algorithms": _try(torch.are_deterministic_algorithms_enabled),
        "deterministic_warn_only": _try(torch.is_deterministic_algorithms_warn_only_enabled),
        "fill_uninitialized_memory": _try(
            lambda: torch.utils.deterministic.fill_uninitialized_memory),
        "cudnn_deterministic": _try(lambda: cudnn.deterministic),
        "cudnn_benchmark": _try(lambda: cudnn.benchmark),
        "cudnn_allow_tf32": _try(lambda: cudnn.allow_tf32),
        "cuda_matmul_allow_tf32": _try(lambda: cuda_matmul.allow_tf32),
        "cuda_matmul_fp32_precision": _try(lambda: cuda_matmul.fp32_precision),
        "cudnn_conv_fp32_precision": _try(lambda: cudnn.conv.fp32_precision),
        "cuda_matmul_allow_fp16_reduced_precision_reduction": _try(
            lambda: cuda_matmul.allow_fp16_reduced_precision_reduction),
        "cuda_matmul_allow_bf16_reduced_precision_reduction": _try(
            lambda: cuda_matmul.allow_bf16_reduced_precision_reduction),
        "float32_matmul_precision": _try(torch.get_float32_matmul_precision),
        "num_threads": _try(torch.get_num_threads),
        "num_interop_threads": _try(torch.get_num_interop_threads),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


def setup(ctx) -> None:
    device, fallback = _choose_device(ctx)
    if device == "cuda":
        # cuBLAS reads this when its first handle is made: before any CUDA work.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    RECORDER.install()
    torch.manual_seed(ctx.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if not ctx.script:
        # Bundled scenarios train in true float32 on every device, as jax's do (highest matmul
        # precision): torch leaves TF32 off for matmuls but on for cuDNN convolutions, and
        # with it on, torch.cnn's fp32 outputs on a GPU were 3,800 times further from float64
        # than on the CPU (8.7e-4 against 2.3e-7). The legacy switches: torch >= 2.9 maps them
        # onto its fp32_precision settings (the new API instead broke torch.compile on 2.9
        # and 2.10 with mixed-API errors), and older torch has only them. User scripts keep
        # the precision they choose (read again after their run: fingerprint["determinism"]).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(ctx.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or inter-op parallel work has already started
        pass

    result = ctx.result
    result["framework_version"] = torch.__version__
    result["device"] = device
    if device == "cuda":
        index = torch.cuda.current_device()
        result["device_name"] = f"cuda:{index} {torch.cuda.get_device_name(index)}"
    else:
        result["device_name"] = "cpu"

    fp = result["fingerprint"]
    if "CUBLAS_WORKSPACE_CONFIG" in os.environ:
        fp["env"]["CUBLAS_WORKSPACE_CONFIG"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
    fp["device_requested"] = ctx.device
    if fallback:
        fp["device_fallback"] = fallback
    info: Dict[str, Any] = {
        "version": torch.__version__,
        "git_version": _try(lambda: torch.version.git_version),
        "debug": _try(lambda: torch.version.debug),
        "cuda": _try(lambda: torch.version.cuda),
        "hip": _try(lambda: torch.version.hip),
        "cudnn": _try(torch.backends.cudnn.version) if device == "cuda" else None,
        "mkldnn": _try(torch.backends.mkldnn.is_available),
        "mkl": _try(torch.backends.mkl.is_available),
        "openmp": _try(torch.backends.openmp.is_available),
        "cpu_capability": _try(torch.backends.cpu.get_cpu_capability),
        "attention": "scaled_dot_product_attention" if HAS_SDPA else "explicit",
    }
    info.update(_build_info())
    if device == "cuda":
        index = torch.cuda.current_device()
        info["gpu"] = {
            "name": _try(lambda: torch.cuda.get_device_name(index)),
            "capability": _try(lambda: list(torch.cuda.get_device_capability(index))),
            "count": _try(torch.cuda.device_count),
            "nccl": _try(lambda: ".".join(map(str, torch.cuda.nccl.version()))),
            # The CUDA version the driver supports (e.g. 13000); the driver's own version is
            # fingerprint["nvidia"]["driver"].
            "driver_cuda": devices.driver_cuda_version(),
        }
    fp["torch"] = info
    fp["determinism"] = dict(_determinism_flags(), seed=ctx.seed)


def _device(ctx) -> torch.device:
    return torch.device(ctx.result["device"] or "cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------- models

def _tensor(t: gen.Tensor, device: torch.device) -> torch.Tensor:
    shape, values = t
    return torch.tensor(values, dtype=torch.float32).reshape(shape).to(device)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(gen.MLP["in"], gen.MLP["hidden"])
        self.fc2 = nn.Linear(gen.MLP["hidden"], gen.MLP["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))

    def gen_names(self) -> Dict[str, nn.Parameter]:
        return {"w1": self.fc1.weight, "b1": self.fc1.bias,
                "w2": self.fc2.weight, "b2": self.fc2.bias}


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
        q, k, v = (x.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for x in (q, k, v))
        a = _causal_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        h = h + self.proj(a)
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        c = gen.LM
        self.tok_emb = nn.Embedding(c["vocab"], c["d"])
        self.pos_emb = nn.Embedding(c["seq"], c["d"])
        self.blocks = nn.ModuleList(Block(c["d"], c["heads"]) for _ in range(c["layers"]))
        self.lnf = nn.LayerNorm(c["d"], eps=1e-5)
        self.head = nn.Linear(c["d"], c["vocab"], bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        h = self.tok_emb(tokens) + self.pos_emb(pos)
        for block in self.blocks:
            h = block(h)
        return self.head(self.lnf(h))

    def gen_names(self) -> Dict[str, nn.Parameter]:
        names: Dict[str, nn.Parameter] = {"tok_emb": self.tok_emb.weight,
                                          "pos_emb": self.pos_emb.weight}
        for i, blk in enumerate(self.blocks):
            p = f"l{i}."
            for short, mod in (("ln1", blk.ln1), ("qkv", blk.qkv), ("proj", blk.proj),
                               ("ln2", blk.ln2), ("fc1", blk.fc1), ("fc2", blk.fc2)):
                names[p + short + "_w"] = mod.weight
                names[p + short + "_b"] = mod.bias
        names["lnf_w"] = self.lnf.weight
        names["lnf_b"] = self.lnf.bias
        names["head_w"] = self.head.weight
        return names


def _load_gen(named: Dict[str, nn.Parameter], values: Dict[str, gen.Tensor]) -> None:
    """Copy gen's initial weights into the parameters, in gen's order; names must match."""
    if list(named) != list(values):
        raise RuntimeError(f"parameter names differ from gen's: {list(named)} vs {list(values)}")
    with torch.no_grad():
        for name, param in named.items():
            shape, flat = values[name]
            if tuple(param.shape) != tuple(shape):
                raise RuntimeError(f"{name}: shape {tuple(param.shape)} vs gen {shape}")
            param.copy_(torch.tensor(flat, dtype=torch.float32).reshape(shape))


# --------------------------------------------------------------------------- training loop

def _raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's bytes in native (little-endian) order, without numpy."""
    t = t.detach().cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _norm64(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).sum().sqrt().item())


def _grad_norm(params: Sequence[nn.Parameter]) -> Optional[float]:
    """Total L2 norm of all gradients, summed in float64, before the optimiser step."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None
    total = torch.stack([g.detach().double().pow(2).sum() for g in grads]).sum()
    return float(total.sqrt().item())


def _record_params(ctx, named: Dict[str, torch.Tensor]) -> None:
    ctx.set_params([(name, _raw_bytes(t)) for name, t in named.items()],
                   {name: _norm64(t) for name, t in named.items()})


def _set_outputs(ctx, out: torch.Tensor) -> None:
    out = out.detach().float().cpu()
    ctx.set_outputs(out.reshape(-1).tolist(), list(out.shape))


def _autocast(device: torch.device, dtype: Optional[torch.dtype]):
    if dtype is None:
        return _NullContext()
    return torch.autocast(device.type, dtype=dtype)


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


def train(ctx, model: nn.Module, loss_fn: Callable[..., torch.Tensor],
          probe_fn: Callable[[nn.Module], torch.Tensor], optimizer: torch.optim.Optimizer,
          named_params: Dict[str, torch.Tensor], amp_dtype: Optional[torch.dtype] = None,
          probe_model: Optional[nn.Module] = None, batches: Optional[Batches] = None) -> None:
    """The one training loop of every bundled torch scenario.

    `model` is what runs (a compiled wrapper may be passed here); `probe_model` (default:
    `model`) computes the probe outputs; `named_params` are the parameters in digest order.
    `batches` (the data scenarios): where each step's inputs come from, handed to
    loss_fn(model, *inputs); without it loss_fn(model) closes over one fixed batch.
    Per step: loss (the float32 value as a Python float), total gradient norm, wall time of
    the whole step, fetching its batch included (synchronised on cuda).
    """
    device = _device(ctx)
    params = [p for p in model.parameters() if p.requires_grad]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(ctx.steps):
        start = time.perf_counter()
        inputs: Tuple[torch.Tensor, ...] = ()
        ids = None
        if batches is not None:
            fetched, ids = next(batches.iterator)
            inputs = tuple(t.to(device) for t in fetched)
        # A localisation run records the module calls of one step, up to its backward: the
        # weights it saw are still those the optimiser step below moves.
        capture = Capture(step) if step == getattr(ctx, "locate_step", None) else None
        if capture is not None:
            capture.attach(model)
        optimizer.zero_grad(set_to_none=True)
        with _autocast(device, amp_dtype):
            loss = loss_fn(model, *inputs)
        loss.backward()
        if capture is not None:
            ctx.result["capture"] = capture.finish()
        norm = _grad_norm(params)
        optimizer.step()
        value = loss.detach().float().item()
        _sync(device)
        ctx.record_step(value, norm, time.perf_counter() - start)
        if ids is not None:
            ctx.record_batch(ids, batches.per_epoch)
    probed = model if probe_model is None else probe_model
    # A localisation run of a difference the training never showed (equal losses and gradient
    # norms, other probe outputs: a kernel that only the eval-mode forward reaches) records the
    # module calls of the probe instead, its locate step one past the last training step.
    capture = Capture(ctx.steps, probe=True) \
        if ctx.steps == getattr(ctx, "locate_step", None) else None
    if capture is not None:
        capture.attach(probed)
    with torch.no_grad(), _autocast(device, amp_dtype):
        out = probe_fn(probed)
    if capture is not None:
        ctx.result["capture"] = capture.finish()
    _set_outputs(ctx, out)
    _record_params(ctx, named_params)
    if amp_dtype is not None:
        ctx.result["dtype"] = str(amp_dtype).replace("torch.", "")
    if device.type == "cuda":
        # The caching allocator's peak since the reset above: tensors only, not its cache.
        ctx.result["peak_device_memory_bytes"] = int(torch.cuda.max_memory_allocated())


# --------------------------------------------------------------------------- scenarios

def _mlp_setup(ctx, init: str, dtype: torch.dtype = torch.float32
               ) -> Tuple[MLP, Callable, Callable, Dict[str, torch.Tensor]]:
    device = _device(ctx)
    if init == "torch":
        torch.manual_seed(ctx.seed)  # the stream is the point: nothing may consume it first
        model = MLP()
        named = dict(model.named_parameters())
    else:
        model = MLP()
        _load_gen(model.gen_names(), gen.mlp_params(ctx.seed))
        named = model.gen_names()
    model.to(device, dtype)
    (x_shape, x_flat), labels, probe = gen.mlp_data(ctx.seed)
    x = torch.tensor(x_flat, dtype=torch.float32).reshape(x_shape).to(device, dtype)
    y = torch.tensor(labels, dtype=torch.long, device=device)
    p = _tensor(probe, device).to(dtype)
    return model, (lambda m: F.cross_entropy(m(x), y)), (lambda m: m(p)), named


Wrap = Optional[Callable[[nn.Module], nn.Module]]


def _mlp(ctx, init: str = "gen", wrap: Wrap = None, dtype: torch.dtype = torch.float32) -> None:
    """`wrap` turns the built model into what runs, e.g. torch.compile for a compiled variant."""
    model, loss_fn, probe_fn, named = _mlp_setup(ctx, init, dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=gen.MLP["lr"], betas=(0.9, 0.999),
                                 eps=1e-8)
    train(ctx, wrap(model) if wrap else model, loss_fn, probe_fn, optimizer, named,
          probe_model=model)


def _lm(ctx, amp_dtype: Optional[torch.dtype] = None, wrap: Wrap = None,
        dtype: torch.dtype = torch.float32) -> None:
    device = _device(ctx)
    model = GPT()
    _load_gen(model.gen_names(), gen.lm_params(ctx.seed))
    model.to(device, dtype)
    named = model.gen_names()
    inputs, targets, probe = gen.lm_data(ctx.seed)
    x = torch.tensor(inputs, dtype=torch.long, device=device)
    y = torch.tensor(targets, dtype=torch.long, device=device)
    p = torch.tensor(probe, dtype=torch.long, device=device)
    vocab = gen.LM["vocab"]
    loss_dtype = torch.float64 if dtype == torch.float64 else torch.float32

    def loss_fn(m: nn.Module) -> torch.Tensor:
        logits = m(x)
        # float32 under autocast (as users write it); fp64 stays fp64 for the reference run
        return F.cross_entropy(logits.reshape(-1, vocab).to(loss_dtype), y.reshape(-1))

    optimizer = torch.optim.AdamW(model.parameters(), lr=gen.LM["lr"], betas=(0.9, 0.999),
                                  eps=1e-8, weight_decay=gen.LM["weight_decay"])
    train(ctx, wrap(model) if wrap else model, loss_fn, lambda m: m(p), optimizer, named,
          amp_dtype, probe_model=model)


class CNN(nn.Module):
    """gen.CNN: conv -> BatchNorm -> ReLU -> max pool, a residual block, global average pool."""

    def __init__(self) -> None:
        super().__init__()
        c = gen.CNN
        w = c["width"]

        def norm() -> nn.BatchNorm2d:
            return nn.BatchNorm2d(w, eps=c["eps"], momentum=c["momentum"])

        self.conv1 = nn.Conv2d(c["channels"], w, 3, padding=1, bias=False)
        self.bn1 = norm()
        self.conv2 = nn.Conv2d(w, w, 3, padding=1, bias=False)
        self.bn2 = norm()
        self.conv3 = nn.Conv2d(w, w, 3, padding=1, bias=False)
        self.bn3 = norm()
        self.fc = nn.Linear(w, c["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        r = F.relu(self.bn2(self.conv2(h)))
        h = F.relu(self.bn3(self.conv3(r)) + h)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))

    def gen_names(self) -> Dict[str, nn.Parameter]:
        names: Dict[str, nn.Parameter] = {}
        for conv, bn in (("conv1", "bn1"), ("conv2", "bn2"), ("conv3", "bn3")):
            names[conv + "_w"] = getattr(self, conv).weight
            names[bn + "_w"] = getattr(self, bn).weight
            names[bn + "_b"] = getattr(self, bn).bias
        names["fc_w"] = self.fc.weight
        names["fc_b"] = self.fc.bias
        return names

    def gen_buffers(self) -> Dict[str, torch.Tensor]:
        """The running statistics in gen.cnn_buffers' order (read after .to(): it replaces
        buffers)."""
        out: Dict[str, torch.Tensor] = {}
        for bn in gen.CNN_NORMS:
            out[bn + "_mean"] = getattr(self, bn).running_mean
            out[bn + "_var"] = getattr(self, bn).running_var
        return out


def _cnn(ctx, amp_dtype: Optional[torch.dtype] = None, wrap: Wrap = None,
         dtype: torch.dtype = torch.float32) -> None:
    """gen.CNN trained in train mode (batch statistics, running statistics updated); the probe
    runs in eval mode (running statistics), and the running statistics follow the parameters
    in the digest."""
    device = _device(ctx)
    model = CNN()
    _load_gen(model.gen_names(), gen.cnn_params(ctx.seed))
    _load_gen(model.gen_buffers(), gen.cnn_buffers())
    model.to(device, dtype)
    named = {**model.gen_names(), **model.gen_buffers()}
    (x_shape, x_flat), labels, probe = gen.cnn_data(ctx.seed)
    x = torch.tensor(x_flat, dtype=torch.float32).reshape(x_shape).to(device, dtype)
    y = torch.tensor(labels, dtype=torch.long, device=device)
    p = _tensor(probe, device).to(dtype)
    loss_dtype = torch.float64 if dtype == torch.float64 else torch.float32

    def probe_fn(m: nn.Module) -> torch.Tensor:
        m.eval()
        try:
            return m(p)
        finally:
            m.train()

    optimizer = torch.optim.Adam(model.parameters(), lr=gen.CNN["lr"], betas=(0.9, 0.999),
                                 eps=1e-8)
    model.train()
    train(ctx, wrap(model) if wrap else model,
          lambda m: F.cross_entropy(m(x).to(loss_dtype), y), probe_fn, optimizer, named,
          amp_dtype, probe_model=model)


class _Samples(torch.utils.data.Dataset):
    """gen.pipeline_data as a map-style dataset. The map step (x * scale) runs here, on the
    DataLoader's worker processes; each sample carries its id."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[i] * gen.DATA["scale"], self.y[i], i


def _collate(items: List[Tuple[torch.Tensor, torch.Tensor, int]]
             ) -> Tuple[Tuple[torch.Tensor, torch.Tensor], List[int]]:
    xs, ys, ids = zip(*items)
    return (torch.stack(xs), torch.stack(ys)), [int(i) for i in ids]


def _endless(loader: Any) -> Iterator[Any]:
    while True:  # one pass of the loader is an epoch; the sampler reshuffles for the next
        yield from loader


def _data(ctx) -> None:
    """torch.data: gen.MLP trained from a DataLoader: shuffled by its RandomSampler through a
    seeded torch.Generator, num_workers worker processes (persistent), a collate step."""
    d = gen.DATA
    (shape, flat), labels = gen.pipeline_data(ctx.seed)
    x = torch.tensor(flat, dtype=torch.float32).reshape(shape)
    y = torch.tensor(labels, dtype=torch.long)
    order = torch.Generator()
    order.manual_seed(ctx.seed)
    loader = torch.utils.data.DataLoader(
        _Samples(x, y), batch_size=d["batch"], shuffle=True, generator=order,
        num_workers=d["workers"], collate_fn=_collate, drop_last=True,
        persistent_workers=True, prefetch_factor=d["prefetch"])
    model, _, probe_fn, named = _mlp_setup(ctx, "gen")
    optimizer = torch.optim.Adam(model.parameters(), lr=gen.MLP["lr"], betas=(0.9, 0.999),
                                 eps=1e-8)
    batches = _endless(loader)
    try:
        train(ctx, model, lambda m, xb, yb: F.cross_entropy(m(xb), yb), probe_fn, optimizer,
              named, batches=Batches(batches, len(loader)))
    finally:
        batches.close()  # the workers stop with the loader's iterator, not at exit
        del loader


# The data-parallel scenario's processes: this one (rank 0, which records) and the ones it starts.
WORLD = gen.DATA_PARALLEL
DDP_TIMEOUT_S = 120  # a rank that died leaves the others in a collective until then


def _ddp(ctx) -> None:
    """torch.ddp: gen.MLP under DistributedDataParallel, WORLD processes, each on its share of
    the batch: over gloo on the CPU, over NCCL on WORLD GPUs (one a rank: NCCL refuses two ranks
    on one GPU). DDP's reducer all-reduces the gradients (mean over ranks) through the default
    allreduce hook, timed: the synchronisation time per step. Rank 0 records its own loss, the
    all-reduced gradients' norm, outputs and parameters (equal on every rank).

    The other ranks are spawned, not forked, on every device: a forked child cannot use CUDA
    once this process has (setup() has), and one start method for both devices keeps the CUDA
    path the one the CPU tests run. A spawned rank imports torch and repeats setup() itself."""
    import multiprocessing
    import shutil
    import tempfile

    cuda = _device(ctx).type == "cuda"
    if cuda and torch.cuda.device_count() < WORLD:
        raise RuntimeError(f"torch.ddp needs {WORLD} GPUs (one a rank, NCCL), found "
                           f"{torch.cuda.device_count()}")
    rendezvous = tempfile.mkdtemp(prefix="lockguard-ddp-")
    init = "file://" + os.path.join(rendezvous, "init")
    spawned = multiprocessing.get_context("spawn")
    others = [spawned.Process(target=_ddp_other_rank, args=(_shadow_context(ctx), rank, init),
                              name=f"lockguard-ddp-rank{rank}", daemon=True)
              for rank in range(1, WORLD)]
    try:
        for process in others:
            process.start()
        sync: List[float] = []
        _ddp_rank(ctx, 0, init, sync)
        for process in others:
            process.join(DDP_TIMEOUT_S)
            if process.exitcode != 0:
                raise RuntimeError(f"{process.name} ended with exit code {process.exitcode}")
        if len(sync) > 1:
            ctx.result["timings"]["sync_median_s"] = statistics.median(sync[1:])
    finally:
        for process in others:
            if process.is_alive():
                process.kill()
        shutil.rmtree(rendezvous, ignore_errors=True)


def _ddp_other_rank(ctx, rank: int, init: str) -> None:
    """A spawned rank: sets up as the harness did, trains, then leaves at once. Its objects are
    not torn down: a DDP reducer's and gloo's destructors in a child were seen to hang now and
    then (2 runs in 15), leaving the harness waiting for a rank that had finished its work."""
    import traceback

    try:
        if ctx.result["device"] == "cuda":
            torch.cuda.set_device(rank)  # before setup() asks CUDA anything: this rank's GPU
        setup(ctx)
        _ddp_rank(ctx, rank, init)
    except BaseException:  # noqa: BLE001 - said on stderr; the exit code tells rank 0
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _ddp_rank(ctx, rank: int, init: str, sync: Optional[List[float]] = None) -> None:
    import datetime

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    # On cuda, _device(ctx) is this rank's GPU: the current device, GPU 0 for rank 0 as setup()
    # found it, and set by _ddp_other_rank before its setup() for the others.
    cuda = _device(ctx).type == "cuda"
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=DDP_TIMEOUT_S))
    try:
        model, _, probe_fn, named = _mlp_setup(ctx, "gen")
        (shape, flat), labels, _ = gen.mlp_data(ctx.seed)
        share = len(labels) // WORLD
        x = torch.tensor(flat, dtype=torch.float32).reshape(shape)[rank * share:][:share]
        y = torch.tensor(labels, dtype=torch.long)[rank * share:][:share]
        x, y = x.to(_device(ctx)), y.to(_device(ctx))
        ddp = DistributedDataParallel(model, device_ids=[rank] if cuda else None)
        times = sync if sync is not None else []
        # On a GPU the all-reduce runs on NCCL's stream and a future's callback runs when it is
        # queued, not done: it is timed by CUDA events around it, read after the training.
        events: List[Tuple[int, Any, Any]] = []

        # No annotations: DDP checks a hook's annotations against dist.GradBucket and Future,
        # and this module's are strings (from __future__ import annotations).
        def timed_allreduce(state, bucket):  # type: ignore[no-untyped-def]
            begin = _cuda_event() if cuda else time.perf_counter()

            def done(future: Any) -> torch.Tensor:
                if cuda:
                    events.append((len(times) - 1, begin, _cuda_event()))
                else:
                    times[-1] += time.perf_counter() - begin
                return future.value()
            return default_hooks.allreduce_hook(state, bucket).then(done)

        ddp.register_comm_hook(None, timed_allreduce)

        def loss_fn(m: nn.Module) -> torch.Tensor:
            times.append(0.0)  # this step's synchronisation, summed over its buckets
            return F.cross_entropy(m(x), y)

        optimizer = torch.optim.Adam(model.parameters(), lr=gen.MLP["lr"], betas=(0.9, 0.999),
                                     eps=1e-8)
        train(ctx, ddp, loss_fn, probe_fn, optimizer, named, probe_model=model)
        if events:
            torch.cuda.synchronize()
            for step, begin, end in events:
                times[step] += begin.elapsed_time(end) / 1000.0  # milliseconds
        ctx.result["fingerprint"]["distributed"] = {
            "backend": backend, "world_size": WORLD, "hook": "default_hooks.allreduce_hook"}
        if cuda:
            ctx.result["fingerprint"]["distributed"]["nccl"] = _try(
                lambda: ".".join(map(str, torch.cuda.nccl.version())))
        del ddp  # the reducer goes while its process group still exists
    finally:
        dist.destroy_process_group()


def _cuda_event() -> Any:
    """A timing event recorded now on the current stream."""
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _compiled(ctx, family: str) -> None:
    """The compiled twin of torch.<family>, then its eager and fp64 twins for the accuracy rule."""
    build = {"mlp": lambda c, **kw: _mlp(c, "gen", **kw), "lm": lambda c, **kw: _lm(c, **kw),
             "cnn": lambda c, **kw: _cnn(c, **kw)}[family]
    build(ctx, wrap=lambda m: torch.compile(m))
    ctx.end_training()  # the twins below are not the compiled training
    diagnostics = RECORDER.diagnostics() or {}
    if ctx.result["status"] == "ok":
        twins = {}
        cuda = _device(ctx).type == "cuda"
        for name, dtype in (("eager", torch.float32), ("fp64", torch.float64)):
            shadow = _shadow_context(ctx)
            # What the compiled run still holds (its caches) is not the eager twin's.
            held = torch.cuda.memory_allocated() if cuda else 0
            build(shadow, dtype=dtype)
            twins[name] = shadow.result
            if name == "eager" and cuda:
                # Whether compiling still saves memory: the same training eager, right after
                # the compiled one, each from its own start. Device figures only: a twin's host
                # figure cannot be taken in this process (it reuses the pages the compiled run
                # freed, and the compiled one includes the compiler's own work).
                diagnostics["memory"] = {
                    "compiled_device": ctx.result["peak_device_memory_bytes"],
                    "eager_device": shadow.result["peak_device_memory_bytes"] - held}
        mine = {"losses": ctx.result["losses"], "outputs": ctx.result["outputs"]}
        diagnostics["accuracy"] = accuracy(mine, twins["eager"], twins["fp64"], "float32")
    ctx.result["compile"] = diagnostics


def _shadow_context(ctx):
    """A scratch context for a twin run in this process or another DDP rank: same settings,
    its own result."""
    shadow = type(ctx)(ctx.scenario, ctx.framework, ctx.steps, ctx.seed, ctx.device,
                       ctx.threads)
    shadow.result["device"] = ctx.result["device"]
    return shadow


def _with_diagnostics(scenario: Callable[[Any], None]) -> Callable[[Any], None]:
    """Fill result["compile"] from the recorder after a scenario, also when it raised."""
    def run(ctx) -> None:
        try:
            scenario(ctx)
        finally:
            if ctx.result.get("compile") is None:
                ctx.result["compile"] = RECORDER.diagnostics()
    return run


SCENARIOS: Dict[str, Callable[[Any], None]] = {sid: _with_diagnostics(fn) for sid, fn in {
    "torch.mlp": lambda ctx: _mlp(ctx, "gen"),
    "torch.lm": lambda ctx: _lm(ctx),
    "torch.lm.bf16": lambda ctx: _lm(ctx, torch.bfloat16),
    "torch.rng": lambda ctx: _mlp(ctx, "torch"),
    "torch.mlp.compile": lambda ctx: _compiled(ctx, "mlp"),
    "torch.lm.compile": lambda ctx: _compiled(ctx, "lm"),
    "torch.cnn": lambda ctx: _cnn(ctx),
    "torch.cnn.bf16": lambda ctx: _cnn(ctx, torch.bfloat16),
    "torch.cnn.compile": lambda ctx: _compiled(ctx, "cnn"),
    "torch.data": _data,
    "torch.ddp": _ddp,
}.items()}


# --------------------------------------------------------------------------- user scripts

def _is_array(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic))


# numpy arrays and scalars are read exactly as the numpy, jax and tensorflow modules read them
_NUMPY = host_array_adapter(_is_array, numpy.asarray) if numpy is not None else None


def _real_tensor(t: torch.Tensor, what: str, value: Any) -> torch.Tensor:
    if t.is_complex() or t.dtype == torch.bool:
        raise UserResultError(f"{what} has dtype {t.dtype}, expected real numbers "
                              f"(got {describe(value)})")
    return t


def _to_floats(value: Any, what: str) -> Tuple[List[float], List[int]]:
    if not isinstance(value, torch.Tensor):
        return _NUMPY.to_floats(value, what)
    t = _real_tensor(value.detach(), what, value).to("cpu", torch.float64)  # exact widening
    return t.reshape(-1).tolist(), list(t.shape)


def _param_bytes(value: Any, what: str) -> Tuple[bytes, float]:
    if isinstance(value, torch.Tensor):
        t = value.detach()
    else:
        try:
            t = torch.as_tensor(value)
        except Exception as exc:  # noqa: BLE001
            raise UserResultError(f"{what} is not a tensor: {describe(value)}") from exc
    t = _real_tensor(t, what, value)
    return _raw_bytes(t), _norm64(t)


_USER = Adapter(_is_array, _to_floats, _param_bytes, kind="tensor")
# A Lightning-style module's gradient norm per step, as the bundled scenarios compute theirs
# (run.py hands it to entry_shapes.entry_run).
grad_norm_of = _grad_norm


def run_user(ctx, module) -> None:
    """Run a user script's run(steps, seed) under the determinism set by setup(); the script's
    torch.compile calls are observed by RECORDER (installed in setup, before the import)."""
    try:
        # The script was imported after setup(): re-seed so its import cannot shift the streams.
        torch.manual_seed(ctx.seed)
        seed_host_rngs(ctx.seed, numpy)
        device = _device(ctx)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        run_script(ctx, module, _USER, sync=lambda: _sync(device),
                   capture=TorchUserCapture(getattr(ctx, "locate_step", None)))
        if device.type == "cuda":
            ctx.result["peak_device_memory_bytes"] = int(torch.cuda.max_memory_allocated())
    finally:
        ctx.result["compile"] = RECORDER.diagnostics()
        # What the script itself set (TF32, deterministic algorithms) is what it trained with.
        ctx.result["fingerprint"]["determinism"] = dict(_determinism_flags(), seed=ctx.seed)
