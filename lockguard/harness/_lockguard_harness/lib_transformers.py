"""The transformers scenarios: small models built by transformers from a config, initialised by
its own code under torch.manual_seed(seed), trained by torch_.train on the lm family's tokens.

    transformers.gpt2   GPT2LMHeadModel(GPT2Config(vocab 64, n_positions 16, n_embd 32, 2 layers,
                        2 heads; every other field transformers' default: dropout 0.1, GELU
                        "gelu_new", layer-norm epsilon 1e-5)), the causal LM loss transformers
                        computes from labels=input_ids, AdamW(lr 1e-3); probe: eval-mode logits
    transformers.bert   BertForMaskedLM(BertConfig(same sizes, intermediate 128)), every fourth
                        token (from the second) replaced by a mask id and predicted, the MLM loss
                        transformers computes from labels, AdamW(lr 1e-3)

What they guard is transformers' own code: its initialisation (_init_weights and the order it
draws in), the attention implementation it picks (fingerprint["library_choices"]), its
activations, epsilons and losses. The digest covers the whole state_dict. Nothing is downloaded:
the hub is offline for the process.

Runs inside the target environment (stdlib, torch, transformers and what it imports); imported
by run.py after torch_.setup.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List

# Before transformers and huggingface_hub read them: a config needs no network, and a run that
# tried would fail here instead of downloading.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

import torch  # noqa: E402
import transformers  # noqa: E402

from . import gen, torch_  # noqa: E402
from .common import record_libraries  # noqa: E402

# What decides how transformers builds and runs a model beside its own version.
VERSIONS = ("transformers", "huggingface-hub", "tokenizers", "safetensors")
LR = 1e-3
MASK_EVERY = 4


def _train(ctx, model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module], torch.Tensor],
           probe: torch.Tensor) -> None:
    def probe_fn(m: torch.nn.Module) -> torch.Tensor:
        m.eval()
        try:
            return m(input_ids=probe).logits
        finally:
            m.train()

    # the state_dict's tensors share the parameters' storage: read after training, they are
    # the trained values (buffers included)
    named: Dict[str, torch.Tensor] = dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model.train()
    torch_.train(ctx, model, loss_fn, probe_fn, optimizer, named)
    record_libraries(ctx, VERSIONS,
                     attention=getattr(model.config, "_attn_implementation", None),
                     model=type(model).__name__)


def _tokens(rows: List[List[int]], device: torch.device) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long, device=device)


def _gpt2(ctx) -> None:
    c = gen.LM
    device = torch_._device(ctx)
    torch.manual_seed(ctx.seed)  # transformers' init draws from torch's global RNG
    config = transformers.GPT2Config(vocab_size=c["vocab"], n_positions=c["seq"], n_embd=c["d"],
                                     n_layer=c["layers"], n_head=c["heads"])
    model = transformers.GPT2LMHeadModel(config).to(device)
    inputs, _, probe = gen.lm_data(ctx.seed)
    x = _tokens(inputs, device)
    _train(ctx, model, lambda m: m(input_ids=x, labels=x).loss, _tokens(probe, device))


def _bert(ctx) -> None:
    c = gen.LM
    device = torch_._device(ctx)
    torch.manual_seed(ctx.seed)
    config = transformers.BertConfig(vocab_size=c["vocab"], hidden_size=c["d"],
                                     num_hidden_layers=c["layers"],
                                     num_attention_heads=c["heads"],
                                     intermediate_size=4 * c["d"],
                                     max_position_embeddings=c["seq"])
    model = transformers.BertForMaskedLM(config).to(device)
    inputs, _, probe = gen.lm_data(ctx.seed)
    mask_id = c["vocab"] - 1
    masked = [[mask_id if t % MASK_EVERY == 1 else tok for t, tok in enumerate(row)]
              for row in inputs]
    labels = [[tok if t % MASK_EVERY == 1 else -100 for t, tok in enumerate(row)]
              for row in inputs]
    x, y = _tokens(masked, device), _tokens(labels, device)
    _train(ctx, model, lambda m: m(input_ids=x, labels=y).loss, _tokens(probe, device))


SCENARIOS: Dict[str, Callable[[Any], None]] = {
    "transformers.gpt2": _gpt2,
    "transformers.bert": _bert,
}
