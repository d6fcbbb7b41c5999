"""The transformers scenarios computed without lockguard: an independent reference.

    python transformers_reference.py MODEL STEPS TOKENS.json OUT.json

MODEL is gpt2 or bert. Builds the model from the same config as lockguard's harness
(lib_transformers.py), seeded the same way, and trains it with the same optimiser on the token
rows in TOKENS.json ({"inputs": [[...]], "probe": [[...]]}, written by the test from the shared
generator); writes the losses, the eval-mode probe logits, and the standard deviation of every
weight matrix at initialisation (what a release that changes an initialisation moves). Run with
the interpreter of the environment lockguard built for a lock: same machine, same wheels, so the
numbers agree with lockguard's to the bit. Imports torch and transformers only.
"""

import json
import os
import sys

os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1",
                  TRANSFORMERS_OFFLINE="1")

import torch  # noqa: E402
import transformers  # noqa: E402

model_name, steps, tokens_path, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tokens = json.loads(open(tokens_path).read())
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
if model_name == "gpt2":
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2))
    x = torch.tensor(tokens["inputs"])
    labels = x
else:
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=16))
    rows = tokens["inputs"]
    x = torch.tensor([[63 if t % 4 == 1 else v for t, v in enumerate(r)] for r in rows])
    labels = torch.tensor([[v if t % 4 == 1 else -100 for t, v in enumerate(r)] for r in rows])
init_std = {name: float(p.detach().double().std()) for name, p in model.named_parameters()
            if p.dim() == 2}
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
losses = []
for _ in range(steps):
    optimizer.zero_grad(set_to_none=True)
    loss = model(input_ids=x, labels=labels).loss
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    logits = model(input_ids=torch.tensor(tokens["probe"])).logits
json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
           "losses": losses, "outputs": logits.reshape(-1).tolist(), "init_std": init_std,
           "attention": model.config._attn_implementation}, open(out_path, "w"))
