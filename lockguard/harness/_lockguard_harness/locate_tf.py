"""Capture of one TensorFlow or Keras training step, layer by layer: where a drift starts
(lockguard's --locate).

Runs inside the target environment (stdlib, numpy, tensorflow). The record is locate_arrays.py's
(the contract locate_torch.py writes, results.Capture): every variable as the step begins, then
every tapped layer's output, inputs and gradient. The plain-TF scenarios mark their layers with
`tap(name, type, out, *inputs)`, which returns `out` unchanged outside a capture; a Keras model
is captured by `keras_layers`, each layer a tap under its Keras name: a chain of layers
(Sequential, or functional with each layer on the previous one's output: both bundled Keras
models) by `keras_chain`, which calls its layers one by one; a functional model with branches
and merges through a sub-model of the same layers whose outputs are every layer's output
(keras.Model(inputs, [each layer's output])): the same layers on the same graph, so the loss's
gradient reaches each of them; a subclassed model (no graph to read) as a whole.

The float64 referee (locate_torch.py's): every Keras layer tapped is run again after the
loss, on a copy of its inputs, in its own dtype (it must reproduce its output bit for bit, or the
referee is not believed) and as a float64 clone (its class from its config with dtype float64,
the same weights cast to float64) on the inputs cast to float64; its output's distance from
that answer in ULPs of its dtype, max and mean (locate_arrays.ulps). A Dropout in training
draws a new mask on replay: its referee says the replay did not reproduce.

A user script's Keras model (lockguard_locate(step, model, batch): `KerasUserCapture`) is
captured the same way, at that call, on the step's batch: `x`, or `(x, y)` with the model
compiled (its compute_loss: the gradients too; without a loss, the forward outputs only).

How: `capture` runs the step's loss once, eagerly, under a GradientTape that watches every
tapped output, and takes the loss's gradient with respect to each. Eager ops are not the
tf.function's graph (grappler, XLA may rewrite it), so a capture is compared with the other
side's capture, never with the training run's numbers. The variables the loss assigns (BatchNorm's
running statistics) and a Keras layer's RNG state are put back afterwards: the step then runs
from the state it would have had.

tensorflow is imported by capture(), not here: tf_.py imports this module before its setup()
sets the variables TF reads at import.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from .locate_arrays import HostUserCapture, Tapped, occurrence, record, ulps

# While a capture runs its loss: (the tape, the taps so far: (key, type, output, inputs), the
# Keras layers among them by key: (layer, its call's inputs as given, training))
_ACTIVE: List[Tuple[Any, List[Tuple[str, str, Any, List[Any]]], Dict[str, Any]]] = []


def tap(name: str, kind: str, out: Any, *inputs: Any) -> Any:
    """`out`, the output of the layer `name` (of type `kind`) computed from `inputs`; inside a
    capture also recorded, and watched by its tape for the gradient at it."""
    if not _ACTIVE:
        return out
    tape, taps, _ = _ACTIVE[-1]
    tape.watch(out)
    floats = [x for x in inputs if getattr(getattr(x, "dtype", None), "is_floating", False)]
    taps.append((occurrence(name, [t[0] for t in taps]), kind, out, floats))
    return out


def _layer_tap(layer: Any, out: Any, given: Any, training: bool) -> Any:
    """tap() for a Keras layer called on `given` (a tensor, or a list of them): its referee is
    run after the loss (module docstring)."""
    inputs = list(given) if isinstance(given, (list, tuple)) else [given]
    out = tap(layer.name, type(layer).__name__, out, *inputs)
    if _ACTIVE:
        _, taps, layers = _ACTIVE[-1]
        layers[taps[-1][0]] = (layer, given, training)
    return out


def keras_chain(model: Any, x: Any, training: bool = True) -> Any:
    """`model(x)` computed layer by layer, each layer's call a tap under its Keras name (its
    Input layer, which computes nothing, left out)."""
    h = x
    for layer in model.layers:
        if type(layer).__name__ == "InputLayer":
            continue
        h = _layer_tap(layer, layer(h, training=training), h, training)
    return h


def keras_layers(model: Any, x: Any, training: bool = True) -> Any:
    """`model(x)` with every layer tapped (module docstring): a Sequential by keras_chain, a
    functional model through a sub-model of every layer's output, a subclassed one whole."""
    if type(model).__name__ == "Sequential":
        return keras_chain(model, x, training)
    plan = _functional_plan(model)
    if plan is None:
        return _layer_tap(model, model(x, training=training), x, training)
    sub, steps, final = plan
    values = sub(x, training=training)
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    given = list(x) if isinstance(x, (list, tuple)) else [x]

    def value(ref: Tuple[str, int]) -> Any:
        return given[ref[1]] if ref[0] == "input" else values[ref[1]]

    for layer, out, ins, listed in steps:
        args = [value(r) for r in ins]
        _layer_tap(layer, values[out], args if listed else args[0], training)
    return values[final]


def _functional_plan(model: Any) -> Optional[Tuple[Any, List[Any], int]]:
    """(the sub-model whose outputs are every layer's output, each layer's (layer, its output's
    index, its inputs' references, whether it takes a list), the model output's index); None
    for a model without a graph or with a layer called more than once (no one output)."""
    import keras

    inputs = list(getattr(model, "inputs", None) or [])
    outputs = list(getattr(model, "outputs", None) or [])
    if not inputs or len(outputs) != 1:
        return None
    fed = {id(t): i for i, t in enumerate(inputs)}
    tensors: List[Any] = []
    index: Dict[int, int] = {}

    def slot(t: Any) -> Tuple[str, int]:
        if id(t) in fed:
            return ("input", fed[id(t)])
        if id(t) not in index:
            index[id(t)] = len(tensors)
            tensors.append(t)
        return ("tensor", index[id(t)])

    steps = []
    try:
        for layer in model.layers:
            if type(layer).__name__ == "InputLayer":
                continue
            out, given = layer.output, layer.input
            if isinstance(out, (list, tuple)):
                return None
            listed = isinstance(given, (list, tuple))
            ins = [slot(t) for t in (given if listed else [given])]
            steps.append((layer, slot(out)[1], ins, listed))
        final = slot(outputs[0])
    except (AttributeError, ValueError):  # a layer shared between calls has no one output
        return None
    if final[0] != "tensor":
        return None
    return (keras.Model(inputs[0] if len(inputs) == 1 else inputs, tensors), steps,
            final[1])


def capture(step: int, model: str, leaves: Dict[str, Any], loss: Optional[Callable[[], Any]],
            restore: List[Any]) -> Dict[str, Any]:
    """The capture of the step whose loss is `loss()` (None: the variables only): `leaves` the
    variables by name as the step begins, in the model's order; `restore` the variables the
    loss may assign, put back after it; `model` the root call's type."""
    values, taps = tapped(leaves, loss, restore)
    return record(step, model, values, taps)


def tapped(leaves: Dict[str, Any], loss: Optional[Callable[[], Any]], restore: List[Any]
           ) -> Tuple[Dict[str, Any], List[Tapped]]:
    """capture()'s leaves as host arrays and taps (outputs, inputs, gradients, referees);
    `loss()` may return None (a forward without a loss: no gradients)."""
    import numpy as np
    import tensorflow as tf

    values = {name: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
              for name, v in leaves.items()}
    if loss is None:
        return values, []
    saved = [v.numpy() for v in restore]
    with tf.GradientTape(persistent=False) as tape:
        _ACTIVE.append((tape, [], {}))
        try:
            value = loss()
        finally:
            _, seen, layers = _ACTIVE.pop()
    grads = (tape.gradient(value, [t[2] for t in seen]) if value is not None
             else [None] * len(seen))
    outs = {t[0]: t[2] for t in seen}
    referees = {key: _referee(layer, given, outs[key], training)
                for key, (layer, given, training) in layers.items()}
    for v, s in zip(restore, saved):
        v.assign(s)
    return values, [(key, kind, out.numpy(), [x.numpy() for x in inputs],
                     None if g is None else tf.convert_to_tensor(g).numpy(), referees.get(key))
                    for (key, kind, out, inputs), g in zip(seen, grads)]


def _referee(layer: Any, given: Any, out: Any, training: bool) -> Dict[str, Any]:
    """The layer run again in its own dtype and as a float64 clone (module docstring)."""
    import numpy as np
    import tensorflow as tf

    def cast(v: Any, dtype: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [cast(x, dtype) for x in v]
        if v.dtype.is_floating:
            return tf.identity(v) if dtype is None else tf.cast(v, dtype)
        return v

    try:
        got = np.asarray(out.numpy())
        again = np.asarray(layer(cast(given, None), training=training))
        replay_exact = again.dtype == got.dtype and again.tobytes() == got.tobytes()
        config = dict(layer.get_config(), dtype="float64")
        wide = type(layer).from_config(config)
        wide64 = cast(given, tf.float64)
        wide(wide64, training=training)  # built; then the same weights, widened
        wide.set_weights([np.asarray(w, dtype=np.float64) if np.asarray(w).dtype.kind == "f"
                          else w for w in layer.get_weights()])
        exact = np.asarray(wide(wide64, training=training))
        if got.dtype.kind != "f" or exact.shape != got.shape:
            return {"replay_exact": replay_exact,
                    "error": f"no float64 answer comparable with a {got.dtype} output"}
        worst, mean = ulps(got, exact)
        return {"replay_exact": bool(replay_exact), "max_ulp": worst, "mean_ulp": mean}
    except Exception as exc:  # noqa: BLE001 - a layer that cannot be replayed says why
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}


class KerasUserCapture(HostUserCapture):
    """A tensorflow user script's capture: its values as host arrays, and a Keras model given
    to lockguard_locate captured at that call on the step's batch (module docstring)."""

    def open_model(self, step: int, model: Any, batch: Any) -> Any:
        if not (hasattr(model, "layers") and hasattr(model, "weights") and callable(model)):
            return super().open_model(step, model, batch)
        x, y = batch if isinstance(batch, tuple) and len(batch) == 2 else (batch, None)
        if x is None:
            raise TypeError(f"lockguard_locate({step}, model, batch) needs the step's batch "
                            "for a Keras model: x, or (x, y) with the model compiled")
        import tensorflow as tf

        # as tensors: a numpy batch's floats are the layers' inputs too (digested, replayed)
        x = tf.nest.map_structure(tf.convert_to_tensor, x)
        compiled = bool(getattr(model, "compiled", False)) and y is not None

        def loss() -> Any:
            out = keras_layers(model, x, training=True)
            return model.compute_loss(x=x, y=y, y_pred=out, training=True) if compiled else None

        names = {str(getattr(v, "path", None) or v.name): v for v in model.weights}
        return tapped(names, loss, list(model.variables))
