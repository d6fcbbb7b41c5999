"""The shapes a team's factory may return beyond (step, batches) (issue 45, point 1): a
Lightning-style module and a compiled Keras model with its data (harness entry_shapes.py), told
apart by duck typing, and `lockguard init` naming them from the source. Fast: a Lightning-style
module in numpy (a loss whose backward() leaves its gradient, an SGD, a scheduler) is driven
by the harness as Lightning's automatic optimisation drives one, and compared with the same
training looped by hand. The real ones: a torch module (tests/test_team_torch.py) and a Keras
Model.fit (tests/test_team_jax_keras.py)."""

from __future__ import annotations

import pytest

from test_team_code import harness, team_project

LIGHT = '''
import numpy as np


class Loss:
    """A loss whose backward() leaves the gradient on the module, as autograd would."""

    def __init__(self, value, grad, module):
        self.value, self.grad, self.module = value, grad, module

    def backward(self):
        self.module.grad = self.grad

    def detach(self):
        return self.value


class SGD:
    def __init__(self, module, lr):
        self.module, self.lr = module, lr

    def zero_grad(self):
        self.module.grad = None

    def step(self):
        self.module.w = (self.module.w - np.float32(self.lr) * self.module.grad).astype(np.float32)


class Halve:
    def __init__(self, opt):
        self.opt = opt

    def step(self):
        self.opt.lr *= 0.5


class Linear:
    """Lightning's three methods on a numpy linear model; three batches a pass."""

    def __init__(self, seed=0, interval="epoch"):
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal((12, 3)).astype(np.float32)
        self.y = self.x @ np.array([1.0, -2.0, 0.5], dtype=np.float32)
        self.w = np.zeros(3, dtype=np.float32)
        self.grad, self.calls, self.interval = None, 0, interval

    def training_step(self, batch, batch_idx):
        if self.grad is not None or batch_idx != self.calls % 3:
            raise AssertionError(f"no zero_grad, or batch_idx {batch_idx} not counted per pass")
        self.calls += 1
        xb, yb = batch
        err = xb @ self.w - yb
        grad = (2 * xb.T @ err / len(yb)).astype(np.float32)
        return {"loss": Loss(float(np.mean(err ** 2)), grad, self)}

    def configure_optimizers(self):
        opt = SGD(self, 0.05)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": Halve(opt), "interval": self.interval}}

    def train_dataloader(self):
        return [(self.x[i:i + 4], self.y[i:i + 4]) for i in range(0, 12, 4)]

    def __call__(self, x):
        return x @ self.w


def lit(seed):
    module = Linear(seed)
    return module, module.x[:2]


def by_hand(steps, seed):
    """The same training looped by hand: the learning rate halves when a pass ends."""
    module, lr, losses = Linear(seed), 0.05, []
    batches = module.train_dataloader()
    for i in range(steps):
        if i and i % 3 == 0:
            lr *= 0.5
        xb, yb = batches[i % 3]
        err = xb @ module.w - yb
        losses.append(float(np.mean(err ** 2)))
        grad = (2 * xb.T @ err / len(yb)).astype(np.float32)
        module.w = (module.w - np.float32(lr) * grad).astype(np.float32)
    return {"losses": losses, "outputs": module.x[:2] @ module.w}


class TwoOptimizers(Linear):
    def configure_optimizers(self):
        return [SGD(self, 0.1), SGD(self, 0.1)]


class Manual(Linear):
    automatic_optimization = False


class Plateau(Linear):
    def configure_optimizers(self):
        opt = SGD(self, 0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": Halve(opt), "monitor": "loss"}}


class NoLoss(Linear):
    def training_step(self, batch, batch_idx):
        return None


class FitsItself:
    """Not a Keras model: fit and train_on_batch, but no Keras class in its MRO."""

    def fit(self, *args, **kwargs):
        return None

    def train_on_batch(self, *args):
        return 0.0


def own_fit(seed):
    return FitsItself(), [1, 2]
'''


def light_project(root):
    return team_project(root, files={"pkg/light.py": LIGHT})


def test_a_lightning_style_module_is_driven_as_lightnings_own_loop(tmp_path):
    project = light_project(tmp_path / "p")
    # 7 steps over 3 batches a pass: batch_idx restarts, the epoch scheduler steps twice.
    driven = harness(project, "pkg.light:lit", 7, tmp_path)
    by_hand = harness(project, "pkg.light:by_hand", 7, tmp_path)
    assert driven["status"] == "ok" and by_hand["status"] == "ok", driven["error"]
    assert driven["losses"] == by_hand["losses"] and len(driven["losses"]) == 7
    assert driven["outputs"] == by_hand["outputs"] and driven["output_shape"] == [2]
    assert driven["grad_norms"] == []  # numpy has no grad_norm_of: not recorded, not made up
    assert driven["timings"]["first_step_s"] is not None  # lockguard timed each step
    # The class itself is an entry (build(seed=seed)): the same training.
    built = harness(project, "pkg.light:Linear", 7, tmp_path)
    assert built["status"] == "ok" and built["losses"] == by_hand["losses"], built["error"]


@pytest.mark.parametrize("entry, words", [
    ("pkg.light:TwoOptimizers", "gave 2 optimizers"),
    ("pkg.light:Manual", "automatic_optimization is off"),
    ("pkg.light:Plateau", "without a metric"),
    ("pkg.light:NoLoss", "training_step returned no loss at step 0"),
    ("pkg.light:own_fit", "must return (step, batches)"),
])
def test_a_shape_off_the_contract_is_a_crash_that_says_why(tmp_path, entry, words):
    result = harness(light_project(tmp_path / "p"), entry, 3, tmp_path)
    assert result["status"] == "crashed" and words in result["error"], result["error"]


def test_configure_optimizers_is_read_in_lightnings_forms():
    from lockguard.harness._lockguard_harness.entry_shapes import (
        lightning_optimizers, UserResultError)

    class Opt:
        def step(self): ...

        def zero_grad(self): ...

    class Sched:
        def step(self): ...

    opt, sched = Opt(), Sched()
    assert lightning_optimizers(opt, "e") == (opt, [])
    assert lightning_optimizers([opt], "e") == (opt, [])
    assert lightning_optimizers(([opt], [sched]), "e") == (opt, [(sched, "epoch")])
    assert lightning_optimizers({"optimizer": opt, "lr_scheduler": {
        "scheduler": sched, "interval": "step"}}, "e") == (opt, [(sched, "step")])
    for wrong in (None, [opt, opt], {"optimizer": opt, "lr_scheduler": {
            "scheduler": sched, "frequency": 2}}):
        with pytest.raises(UserResultError):
            lightning_optimizers(wrong, "e")


def test_init_names_a_lightning_module_and_a_keras_factory_never_importing_them(tmp_path):
    from lockguard.init.project import KERAS_FACTORY, LIGHTNING_SHAPE, find_training

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    lightning = ("import torch\nraise SystemExit('imported')\n\n"
                 "class Regressor:\n    def __init__(self, seed=0, width=16): ...\n"
                 "    def training_step(self, batch, batch_idx): ...\n"
                 "    def configure_optimizers(self): ...\n"
                 "    def train_dataloader(self): ...\n\n"
                 "def fit(steps, seed):\n    ...\n")
    (pkg / "train.py").write_text(lightning)
    found = find_training(tmp_path, "pkg", ("torch",))
    assert (found.entry, found.shape, found.framework) == ("pkg.train:Regressor",
                                                           LIGHTNING_SHAPE, "torch")
    # A factory comes first; a class whose constructor requires more is not an entry.
    (pkg / "train.py").write_text(lightning + "\ndef make(seed):\n    ...\n")
    assert find_training(tmp_path, "pkg", ("torch",)).entry == "pkg.train:make"
    (pkg / "train.py").write_text(lightning.replace("seed=0, width=16", "config"))
    assert find_training(tmp_path, "pkg", ("torch",)).entry == "pkg.train:fit"
    # A factory that compiles a model in a module importing keras: the Keras shape.
    (pkg / "train.py").write_text("import keras\n\ndef make(seed):\n    model = build()\n"
                                  "    model.compile(optimizer='adam', loss='mse')\n"
                                  "    return model, data\n")
    found = find_training(tmp_path, "pkg", ("tensorflow",))
    assert (found.entry, found.shape) == ("pkg.train:make", KERAS_FACTORY)


class FakeTensor:
    """A tensor as entry_shapes sees one: `to(device)` and a `device`."""

    def __init__(self, device="cpu"):
        self.device = device

    def to(self, device):
        return FakeTensor(device)


_LIGHT: dict = {}
exec(LIGHT, _LIGHT)  # the numpy Lightning-style module above, in this process


class Placed(_LIGHT["Linear"]):
    """A Lightning-style module whose parameters live on a device (torch's Module.to)."""

    def __init__(self, seed=0, moves=True):
        super().__init__(seed)
        self.params, self.moves, self.seen = [FakeTensor()], moves, []

    def to(self, device):
        if self.moves:
            self.params = [p.to(device) for p in self.params]
        return self

    def parameters(self):
        return self.params

    def configure_optimizers(self):
        self.seen.append(("configure_optimizers", self.params[0].device))
        return super().configure_optimizers()

    def training_step(self, batch, batch_idx):
        xb, yb = batch
        self.seen.append(("batch", xb[1].device, yb["t"][0].device))
        return super().training_step((xb[0], yb["y"]), batch_idx)

    def train_dataloader(self):
        return [((x, FakeTensor()), {"y": y, "t": [FakeTensor()]})
                for x, y in super().train_dataloader()]


def test_a_lightning_module_trains_on_the_device_the_result_reports():
    """A module and its batches are moved to the run's device before configure_optimizers, as
    a Trainer moves them: one left on a GPU runner's CPU would report the GPU's kernels it
    never ran (a stale PASS). A module whose `to` does not move it is refused."""
    from lockguard.harness._lockguard_harness.entry_shapes import (
        UserResultError, drive_lightning)

    module = Placed()
    drive_lightning(module, None, 4, iter, "e", device="fake:3")
    assert module.seen[0] == ("configure_optimizers", "fake:3")
    assert module.seen[1:] == [("batch", "fake:3", "fake:3")] * 4
    with pytest.raises(UserResultError, match="a parameter is on cpu after module.to"):
        drive_lightning(Placed(moves=False), None, 4, iter, "e", device="fake:3")
    kept = Placed()  # no device given (a framework that reports none): nothing moves
    drive_lightning(kept, None, 1, iter, "e")
    assert kept.seen == [("configure_optimizers", "cpu"), ("batch", "cpu", "cpu")]


def test_steps_per_execution_is_read_from_keras_3_and_tf_keras():
    """keras 3 keeps an int; tf_keras a tf.Variable under `_steps_per_execution`."""
    from lockguard.harness._lockguard_harness.entry_shapes import steps_per_execution

    class Variable:
        def numpy(self):
            import numpy as np
            return np.int64(4)

    class Keras3:
        steps_per_execution = 2

    class TfKeras:
        _steps_per_execution = Variable()

    assert steps_per_execution(Keras3()) == 2
    assert steps_per_execution(TfKeras()) == 4
    assert steps_per_execution(object()) == 1
