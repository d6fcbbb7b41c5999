"""Capture of one TensorFlow or Keras training step, layer by layer: where a drift starts
(lockguard's --locate).

Runs inside the target environment (stdlib, numpy, tensorflow). The record is locate_arrays.py's
(the contract locate_torch.py writes, results.Capture): every variable as the step begins, then
every tapped layer's output, inputs and gradient. The plain-TF scenarios mark their layers with
`tap(name, type, out, *inputs)`, which returns `out` unchanged outside a capture; a Keras model
that is a chain of layers (Sequential, or functional with each layer on the previous one's
output: both bundled Keras models) is captured by `keras_chain`, which calls its layers one by
one, each a tap under its Keras name.

How: `capture` runs the step's loss once, eagerly, under a GradientTape that watches every
tapped output, and takes the loss's gradient with respect to each. Eager ops are not the
tf.function's graph (grappler, XLA may rewrite it), so a capture is compared with the other
side's capture, never with the training run's numbers. The variables the loss assigns (BatchNorm's
running statistics) and a Keras layer's RNG state are put back afterwards: the step then runs
from the state it would have had. No float64 referee (locate_torch.py's replay) yet.

tensorflow is imported by capture(), not here: tf_.py imports this module before its setup()
sets the variables TF reads at import.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from .locate_arrays import occurrence, record

# While a capture runs its loss: (the tape, the taps so far: (key, type, output, inputs))
_ACTIVE: List[Tuple[Any, List[Tuple[str, str, Any, List[Any]]]]] = []


def tap(name: str, kind: str, out: Any, *inputs: Any) -> Any:
    """`out`, the output of the layer `name` (of type `kind`) computed from `inputs`; inside a
    capture also recorded, and watched by its tape for the gradient at it."""
    if not _ACTIVE:
        return out
    tape, taps = _ACTIVE[-1]
    tape.watch(out)
    floats = [x for x in inputs if getattr(getattr(x, "dtype", None), "is_floating", False)]
    taps.append((occurrence(name, [t[0] for t in taps]), kind, out, floats))
    return out


def keras_chain(model: Any, x: Any, training: bool = True) -> Any:
    """`model(x)` computed layer by layer, each layer's call a tap under its Keras name (its
    Input layer, which computes nothing, left out)."""
    h = x
    for layer in model.layers:
        if type(layer).__name__ == "InputLayer":
            continue
        h = tap(layer.name, type(layer).__name__, layer(h, training=training), h)
    return h


def capture(step: int, model: str, leaves: Dict[str, Any], loss: Optional[Callable[[], Any]],
            restore: List[Any]) -> Dict[str, Any]:
    """The capture of the step whose loss is `loss()` (None: the variables only): `leaves` the
    variables by name as the step begins, in the model's order; `restore` the variables the
    loss may assign, put back after it; `model` the root call's type."""
    import numpy as np
    import tensorflow as tf

    values = {name: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
              for name, v in leaves.items()}
    taps: List[Tuple[str, str, Any, List[Any], Optional[Any]]] = []
    if loss is not None:
        saved = [v.numpy() for v in restore]
        with tf.GradientTape(persistent=False) as tape:
            _ACTIVE.append((tape, []))
            try:
                value = loss()
            finally:
                _, seen = _ACTIVE.pop()
        grads = tape.gradient(value, [t[2] for t in seen])
        for v, s in zip(restore, saved):
            v.assign(s)
        taps = [(key, kind, out.numpy(), [x.numpy() for x in inputs],
                 None if g is None else tf.convert_to_tensor(g).numpy())
                for (key, kind, out, inputs), g in zip(seen, grads)]
    return record(step, model, values, taps)
