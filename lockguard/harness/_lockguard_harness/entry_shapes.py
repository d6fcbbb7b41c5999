"""A scenario's `entry` (a function of the team's own code): its shapes (entry_run), what its
factory may return, and how lockguard drives each (`drive`, with what make(seed) returned).

Stdlib only, and framework-free like userscript.py: a shape is told apart by duck typing, and
driven through the methods the team's objects have (a Keras model's `fit`, a torch loss's
`backward`); the one framework computation it needs, a gradient norm, is handed in by the
framework module (torch_.grad_norm_of). The shapes, tested in this order:

  a Lightning-style module   has callable training_step, configure_optimizers and
                             train_dataloader (lightning itself is never imported: a real
                             LightningModule and a plain nn.Module with the three methods are
                             driven alike, without a Trainer); returned alone or as
                             (module, probe)
  a compiled Keras model     has callable fit and train_on_batch, and a class of keras, tf_keras
                             or tensorflow in its MRO; returned as (model, data[, probe]) or as
                             a dict of fit's own arguments {"model", "x", "y", "batch_size",
                             "shuffle", "sample_weight", "class_weight", "probe"}
  a step                     (step, batches[, probe]) with a callable step: any framework

A Lightning module has no fit and a Keras model no training_step, and neither a plain function:
the three are disjoint for the libraries' own classes; an object that has both sets of methods is
driven as a Lightning module (the first test).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from .userscript import UserResultError, describe, takes

# --------------------------------------------------------------------------- the entry

ENTRY_SHAPES = ("fit(steps, seed) returning what run() returns",
                "make(seed) returning (step, batches[, probe]), "
                "a compiled Keras model with its data, or a Lightning-style module")


class EntryRun(NamedTuple):
    """A scenario's `entry` (a function of the team's own code) as the module-like value
    run_user takes: `run(steps, seed, timed)` drives the entry's shape; `home` is the module
    that defines the function (where UserCapture's globals go)."""
    run: Callable[..., Any]
    home: Any = None


def entry_run(fn: Callable[..., Any], name: str,
              grad_norm: Optional[Callable[[List[Any]], Any]] = None,
              device: Optional[str] = None) -> EntryRun:
    """`fn` (the entry `name`, "pkg.train:make") as a run(steps, seed, timed).

    Its shape is told apart by the parameters fn requires (those without a default):
      fit(steps, seed[, timed])  one that trains itself: called as a script's run() is
      make(seed)                 a factory: the team's model, optimiser and data built from the
                                 seed; lockguard trains what it returns (drive:
                                 (step, batches[, probe]), a compiled Keras model with its
                                 data, a Lightning-style module)
      build()                    a factory requiring nothing (a LightningModule class whose
                                 arguments all have defaults): called after lockguard seeded
                                 the framework (with seed=seed when it has a parameter named
                                 seed), its return trained as make's
    `grad_norm(params)`: the framework's global gradient norm, for a Lightning module's steps;
    `device`: the device the result reports ("cuda:0"), where a Lightning module trains.
    """
    required = _required_params(fn, name)
    home = sys.modules.get(getattr(fn, "__module__", None) or "")
    if len(required) == 2:
        return EntryRun(fn, home)
    if len(required) > 1:
        raise UserResultError(f"entry {name} requires {len(required)} parameters "
                              f"{required}; expected {ENTRY_SHAPES[0]} or {ENTRY_SHAPES[1]}")

    seeded = not required and takes(fn, "seed")

    def run(steps: int, seed: int, timed: Callable[[Any], Any] = iter) -> Dict[str, Any]:
        made = fn(seed) if required else fn(seed=seed) if seeded else fn()
        return drive(made, steps, timed, name, grad_norm, device)

    return EntryRun(run, home)


def _required_params(fn: Callable[..., Any], name: str) -> List[str]:
    import inspect

    if not callable(fn):
        raise UserResultError(f"entry {name} is not a function: {describe(fn)}")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise UserResultError(f"entry {name} has no readable signature") from None
    return [p.name for p in params if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


# --------------------------------------------------------------------------- what make returns

KERAS_ROOTS = ("keras", "tf_keras", "tensorflow")
KERAS_FIT_KEYS = ("model", "x", "y", "batch_size", "shuffle", "sample_weight", "class_weight",
                  "probe")
SHAPES = ("(step, batches) or (step, batches, probe)",
          "a compiled Keras model with its data: (model, data[, probe]) or a dict with 'model'",
          "a Lightning-style module (training_step, configure_optimizers, train_dataloader)")


def drive(made: Any, steps: int, timed: Callable[[Any], Any], name: str,
          grad_norm: Optional[Callable[[List[Any]], Any]] = None,
          device: Optional[str] = None) -> Dict[str, Any]:
    """Train what the entry `name` returned for `steps` steps, each through `timed` (the
    harness's StepTimer, `iter` by hand); what a script's run() returns. `grad_norm(params)`:
    the framework's global gradient norm (None: a Lightning module's is not recorded);
    `device`: where a Lightning module trains (drive_lightning)."""
    first = made.get("model") if isinstance(made, dict) else (
        made[0] if isinstance(made, tuple) and made else made)
    if is_lightning(first):
        rest = made[1:] if isinstance(made, tuple) else ()
        if isinstance(made, dict) or len(rest) > 1:
            raise UserResultError(f"entry {name}: a Lightning-style module is returned alone or "
                                  f"as (module, probe), got {describe(made)}")
        return drive_lightning(first, rest[0] if rest else None, steps, timed, name, grad_norm,
                               device)
    if is_keras_model(first):
        if isinstance(made, dict):
            unknown = sorted(str(k) for k in made if k not in KERAS_FIT_KEYS)
            if unknown:
                raise UserResultError(f"entry {name}: unknown keys {unknown} beside a Keras "
                                      f"model; allowed: {list(KERAS_FIT_KEYS)}")
            return drive_keras(dict(made), steps, timed, name)
        if not isinstance(made, tuple) or len(made) not in (2, 3):
            raise UserResultError(f"entry {name}: a Keras model is returned with its data, as "
                                  f"(model, data[, probe]) or a dict; got {describe(made)}")
        return drive_keras({"model": first, "x": made[1],
                            "probe": made[2] if len(made) == 3 else None}, steps, timed, name)
    if isinstance(made, tuple) and len(made) in (2, 3) and callable(made[0]):
        return drive_steps(made, steps, timed, name)
    raise UserResultError(f"entry {name}(seed) must return (step, batches) or (step, batches, "
                          f"probe), {SHAPES[1]}, or {SHAPES[2]}; got {describe(made)}")


def is_lightning(value: Any) -> bool:
    """Whether `value` is driven as a Lightning-style module (its three methods)."""
    return all(callable(getattr(value, attr, None))
               for attr in ("training_step", "configure_optimizers", "train_dataloader"))


def is_keras_model(value: Any) -> bool:
    """Whether `value` is a Keras model: fit and train_on_batch, and a class of a Keras in its
    MRO (a team's own class with a `fit` is not one)."""
    return (callable(getattr(value, "fit", None))
            and callable(getattr(value, "train_on_batch", None))
            and _keras_root(value) is not None)


def _keras_root(model: Any) -> Optional[str]:
    for cls in type(model).__mro__:
        root = (getattr(cls, "__module__", "") or "").split(".")[0]
        if root in KERAS_ROOTS:
            return root
    return None


# --------------------------------------------------------------------------- a step

def drive_steps(made: Tuple[Any, ...], steps: int, timed: Callable[[Any], Any],
                name: str) -> Dict[str, Any]:
    """(step, batches[, probe]): step(batch) for `steps` batches, each returning the loss or
    {"loss": ..., "grad_norm": ...}; probe() after the last step returns the outputs."""
    step, batches = made[0], made[1]
    losses: List[Any] = []
    grad_norms: List[Any] = []
    for i, batch in enumerate(timed(cycled(batches, steps, name))):
        loss = step(batch)
        if isinstance(loss, dict):
            if "loss" not in loss:
                raise UserResultError(f"step {i} returned a dict without 'loss': "
                                      f"{describe(loss)}")
            if "grad_norm" in loss:
                grad_norms.append(loss["grad_norm"])
            loss = loss["loss"]
        losses.append(loss)
    if grad_norms and len(grad_norms) != len(losses):
        raise UserResultError(f"{len(grad_norms)} of {len(losses)} steps returned a "
                              "grad_norm: every step or none")
    out: Dict[str, Any] = {"losses": losses, "grad_norms": grad_norms or None}
    if len(made) == 3 and made[2] is not None:
        out["outputs"] = made[2]()
    return out


def epochs(batches: Any, steps: int, name: str) -> Iterator[Tuple[int, Any]]:
    """`steps` (index in its pass, batch) of `batches`, iterated again from the start each time
    it is exhausted (a DataLoader reshuffles per epoch, as the team's own training sees it)."""
    given = 0
    while given < steps:
        before = given
        for index, batch in enumerate(batches):
            yield index, batch
            given += 1
            if given == steps:
                return
        if given == before:
            raise UserResultError(f"entry {name}: batches yielded no batch")


def cycled(batches: Any, steps: int, name: str) -> Iterator[Any]:
    """`steps` batches of `batches` (epochs, without the index)."""
    return (batch for _, batch in epochs(batches, steps, name))


# --------------------------------------------------------------------------- a Keras model

def drive_keras(fit: Dict[str, Any], steps: int, timed: Callable[[Any], Any],
                name: str) -> Dict[str, Any]:
    """model.fit(x, y, ...) for `steps` batches: a callback stops it after the last one (epochs
    as many as it takes) and records each batch's loss as Keras logs it, the model's metrics
    reset before each batch (Keras logs the epoch's running mean otherwise). Each step is
    timed by `timed` from the end of the previous batch (the first from the start of training:
    its tracing is in it). Gradient norms are not recorded: fit exposes no gradients. The
    probe: probe() if callable, else model(probe, training=False)."""
    model, probe = fit.pop("model"), fit.pop("probe", None)
    if fit.get("x") is None:
        raise UserResultError(f"entry {name}: a Keras model needs its data (x)")
    per_call = steps_per_execution(model)
    if per_call != 1:
        raise UserResultError(f"entry {name}: the model is compiled with steps_per_execution="
                              f"{per_call}; lockguard records each batch (compile it with 1)")
    ticks = timed(range(steps))
    losses: List[Any] = []

    class Recorder(_keras_callback(model, name)):  # type: ignore[misc, valid-type]
        """Each batch's loss; the fit stopped after `steps` batches."""

        def on_train_begin(self, logs: Any = None) -> None:
            next(ticks, None)  # the first step's clock starts

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.model.reset_metrics()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if not logs or "loss" not in logs:
                raise UserResultError(f"entry {name}: Keras logged no loss for batch {batch} "
                                      f"(logs: {describe(logs)})")
            losses.append(logs["loss"])
            if len(losses) >= steps:
                self.model.stop_training = True
            next(ticks, None)  # this step's time; the next one's clock starts

    model.fit(**fit, epochs=steps, verbose=0, callbacks=[Recorder()])
    if len(losses) != steps:
        raise UserResultError(f"entry {name}: fit ran {len(losses)} batches of {steps}")
    out: Dict[str, Any] = {"losses": losses}
    if probe is not None:
        out["outputs"] = probe() if callable(probe) else model(probe, training=False)
    return out


def steps_per_execution(model: Any) -> int:
    """The batches a compiled Keras model runs per call: keras 3's `steps_per_execution` (an
    int), tf_keras's `_steps_per_execution` (a tf.Variable, which has no public name); 1 where
    neither holds a number."""
    for attr in ("steps_per_execution", "_steps_per_execution"):
        value = getattr(model, attr, None)
        if value is None:
            continue
        value = value.numpy() if callable(getattr(value, "numpy", None)) else value
        try:
            return int(value)
        except (TypeError, ValueError):
            continue
    return 1


def _keras_callback(model: Any, name: str) -> type:
    """keras.callbacks.Callback of the Keras the model is built with (keras 3, tf_keras or
    TensorFlow's own), found among the loaded modules: nothing is imported here."""
    root = sys.modules.get(_keras_root(model) or "")
    library = getattr(root, "keras", root) if root is not None and \
        root.__name__ == "tensorflow" else root
    base = getattr(getattr(library, "callbacks", None), "Callback", None)
    if not isinstance(base, type):
        raise UserResultError(f"entry {name}: no keras.callbacks.Callback beside the model's "
                              f"Keras ({describe(model)})")
    return base


# --------------------------------------------------------------------------- a Lightning module

def drive_lightning(module: Any, probe: Any, steps: int, timed: Callable[[Any], Any], name: str,
                    grad_norm: Optional[Callable[[List[Any]], Any]] = None,
                    device: Optional[str] = None) -> Dict[str, Any]:
    """A Lightning-style module trained as Lightning's automatic optimisation does, without a
    Trainer: module.train(); per batch of train_dataloader() (batch_idx counted per pass,
    iterated again when it runs out): optimizer.zero_grad(), loss = training_step(batch,
    batch_idx) (a tensor or a dict with "loss"), loss.backward(), the gradient norm, then
    optimizer.step() and the schedulers whose interval is "step"; an "epoch" one steps when a
    pass ends. The probe, after the last step: probe() if callable, else module(probe) in eval
    mode. As a Trainer does, the module is moved to `device` (the one the result reports: a
    module left on the CPU of a GPU runner would pass without the GPU's kernels ever running)
    before configure_optimizers, and each batch (and a probe) with it: its tensors, in tuples,
    lists and dicts; a module without `to` (not torch) trains where it is. Hooks
    (on_train_epoch_start, ...) and a Trainer's other settings (gradient clipping, precision)
    are not applied: the factory shape runs a training that needs them."""
    if getattr(module, "automatic_optimization", True) is False:
        raise UserResultError(f"entry {name}: automatic_optimization is off (the module steps its "
                              "optimizers through a Trainer); return (step, batches) instead")
    module = to_device(module, device, name)
    optimizer, schedulers = lightning_optimizers(module.configure_optimizers(), name)
    if hasattr(module, "train"):
        module.train()
    losses: List[Any] = []
    norms: List[Any] = []
    for index, batch in timed(epochs(module.train_dataloader(), steps, name)):
        if index == 0 and losses:  # a pass ended: Lightning's epoch schedulers step
            for scheduler, interval in schedulers:
                if interval == "epoch":
                    scheduler.step()
        optimizer.zero_grad()
        out = module.training_step(_batch_to(batch, device), index)
        loss = out.get("loss") if isinstance(out, dict) else out
        if not callable(getattr(loss, "backward", None)):
            raise UserResultError(f"entry {name}: training_step returned no loss at step "
                                  f"{len(losses)}: {describe(out)}")
        loss.backward()
        if grad_norm is not None:
            norms.append(grad_norm(list(module.parameters())))
        optimizer.step()
        for scheduler, interval in schedulers:
            if interval == "step":
                scheduler.step()
        losses.append(loss.detach() if callable(getattr(loss, "detach", None)) else loss)
    result: Dict[str, Any] = {"losses": losses}
    if norms and all(n is not None for n in norms):
        result["grad_norms"] = norms
    if probe is not None:
        if callable(probe):
            result["outputs"] = probe()
        else:
            if hasattr(module, "eval"):
                module.eval()
            result["outputs"] = module(_batch_to(probe, device))
    return result


def to_device(module: Any, device: Optional[str], name: str) -> Any:
    """`module` moved to `device` (torch's Module.to), its parameters checked to be there: a
    module whose `to` does not move it (an override) would report a device it never ran on."""
    if device is None or not callable(getattr(module, "to", None)):
        return module
    moved = module.to(device)
    module = moved if moved is not None else module
    params = getattr(module, "parameters", None)
    wanted = device.split(":")[0]
    for param in params() if callable(params) else ():
        where = str(getattr(param, "device", wanted))
        if where.split(":")[0] != wanted:
            raise UserResultError(f"entry {name}: a parameter is on {where} after "
                                  f"module.to({device!r}); the run reports {device}")
    return module


def _batch_to(value: Any, device: Optional[str]) -> Any:
    """`value` with each tensor (what has `to` and a `device`) moved to `device`, in tuples
    (named ones too), lists and dicts, as Lightning moves a batch."""
    if device is None:
        return value
    if callable(getattr(value, "to", None)) and hasattr(value, "device"):
        return value.to(device)
    if isinstance(value, tuple):
        items = [_batch_to(v, device) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_batch_to(v, device) for v in value]
    if isinstance(value, dict):
        return {k: _batch_to(v, device) for k, v in value.items()}
    return value


def lightning_optimizers(returned: Any, name: str) -> Tuple[Any, List[Tuple[Any, str]]]:
    """(the optimizer, [(scheduler, interval)]) from configure_optimizers()'s return in
    Lightning's forms: an optimizer; [optimizer]; ([optimizer], [schedulers]); a dict
    {"optimizer", "lr_scheduler": scheduler or {"scheduler", "interval"}}. One optimizer (more
    need a Trainer's manual optimisation), a scheduler stepped without a metric."""
    schedulers: List[Any] = []
    if (isinstance(returned, (list, tuple)) and len(returned) == 2
            and isinstance(returned[0], (list, tuple))):
        returned, schedulers = returned[0], list(returned[1])
    if isinstance(returned, (list, tuple)):
        if len(returned) != 1:
            raise UserResultError(f"entry {name}: configure_optimizers() gave {len(returned)} "
                                  "optimizers; lockguard drives one (return (step, batches) "
                                  "for more)")
        returned = returned[0]
    if isinstance(returned, dict):
        if returned.get("lr_scheduler") is not None:
            schedulers.append(returned["lr_scheduler"])
        returned = returned.get("optimizer")
    if not (callable(getattr(returned, "step", None))
            and callable(getattr(returned, "zero_grad", None))):
        raise UserResultError(f"entry {name}: configure_optimizers() returned no optimizer: "
                              f"{describe(returned)}")
    return returned, [_scheduler(s, name) for s in schedulers]


def _scheduler(given: Any, name: str) -> Tuple[Any, str]:
    config = given if isinstance(given, dict) else {"scheduler": given}
    scheduler, interval = config.get("scheduler"), config.get("interval", "epoch")
    if interval not in ("step", "epoch") or config.get("frequency", 1) != 1 \
            or config.get("monitor") is not None or type(scheduler).__name__ == "ReduceLROnPlateau":
        raise UserResultError(f"entry {name}: lockguard steps a scheduler each step or epoch, "
                              f"without a metric (frequency 1); got {describe(given)}")
    if not callable(getattr(scheduler, "step", None)):
        raise UserResultError(f"entry {name}: {describe(scheduler)} is not a scheduler")
    return scheduler, interval
