"""The timm.vit scenario computed without lockguard: an independent reference.

    python timm_reference.py STEPS IMAGES.json OUT.json

Builds ViT-Tiny with timm from the same arguments as lockguard's harness (lib_timm.py), seeded
the same way, and trains it with the same optimiser on the images in IMAGES.json ({"shape":
[...], "x": [...], "labels": [...], "probe_shape": [...], "probe": [...]}, written by the test
from the shared generator); writes the losses, the eval-mode probe logits and the initial
weights' statistics. Run with the interpreter of the environment lockguard built for a lock:
same machine, same wheels, so the numbers agree with lockguard's to the bit. Imports torch and
timm only.
"""

import json
import os
import sys

os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1")

import timm  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

steps, images_path, out_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
data = json.loads(open(images_path).read())
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8,
                          num_classes=10)
init = {name: [float(p.detach().double().mean()), float(p.detach().double().std())]
        for name, p in model.named_parameters() if p.numel() > 1}
x = torch.tensor(data["x"], dtype=torch.float32).reshape(data["shape"])
y = torch.tensor(data["labels"])
probe = torch.tensor(data["probe"], dtype=torch.float32).reshape(data["probe_shape"])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
losses = []
for _ in range(steps):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    logits = model(probe)
json.dump({"timm": timm.__version__, "losses": losses, "outputs": logits.reshape(-1).tolist(),
           "init": init}, open(out_path, "w"))
