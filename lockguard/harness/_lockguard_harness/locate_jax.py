"""Capture of one jax training step, layer by layer: where a drift starts (lockguard's --locate).

Runs inside the target environment (stdlib, numpy, jax). The record is locate_arrays.py's (the
contract locate_torch.py writes, results.Capture): every parameter leaf as the step begins
("w1", "l0.qkv_w", "Dense_0/kernel", BatchNorm's running statistics), then every tapped layer's
output, inputs and gradient. jax has no module hooks: a scenario's forward marks its layers
with `tap(name, type, out, *inputs)`, which returns `out` unchanged outside a capture (the
training step traces to the same program and trains to the same numbers). jax_.train calls
`capture` at the step the host asks for (--locate-step N), with the parameters as they enter
that step, before the step runs.

How: the step's loss is traced once more under jax.jit with every tap recording its output and
adding a zero array (a probe) to it; the gradient of the loss with respect to the probes is the
gradient at each tapped output. That is a program of its own, not the training step's: XLA may
fuse it otherwise, so a capture is compared with the other side's capture, never with the
training run's numbers.

The float64 referee (locate_torch.py's), for a tap given its flax layer (`tap(..., layer=dense)`,
a bound linen module): the layer's variables at the tap come out of the traced capture with its
output; the layer, unbound, is applied again to a copy of its inputs in its own dtype (must
reproduce the captured output bit for bit, or the referee is not believed; the replay runs op by
op, the capture as one XLA program, so a fused layer may not reproduce), then with its
variables and inputs cast to float64 under jax's x64 mode (a `dtype` the layer names set to
float64 too); the output's distance from that answer in ULPs of its dtype (locate_arrays.ulps).
A tap of plain jax (jax_.py's scenarios) holds an output, not an operation: it has no referee.

jax is imported by capture(), not here: jax_.py imports this module before its setup() sets the
variables XLA reads when jax starts.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from .locate_arrays import occurrence, record

_ACTIVE: List["_Recorder"] = []  # the recorder while a capture traces the loss; else empty


def tap(name: str, kind: str, out: Any, *inputs: Any, layer: Any = None) -> Any:
    """`out`, the output of the layer `name` (of type `kind`) computed from `inputs`; inside a
    capture also recorded, with a zero probe added whose gradient is the gradient at `out`;
    `layer`, the bound flax module that computed it, for its referee (module docstring)."""
    if not _ACTIVE:
        return out
    return _ACTIVE[-1].record(name, kind, out, inputs, layer)


class _Recorder:
    """The taps of one trace: their order, types, outputs and inputs (tracers)."""

    def __init__(self, probes: Optional[Dict[str, Any]]) -> None:
        self.probes = probes  # tap key -> zeros of its output; None while shapes are found
        self.order: List[Tuple[str, str]] = []  # (key, type) in the forward's order
        self.values: Dict[str, Tuple[Any, List[Any]]] = {}
        self.shapes: Dict[str, Tuple[Tuple[int, ...], Any]] = {}
        self.layers: Dict[str, Tuple[Any, Any]] = {}  # key -> (unbound layer, its variables)

    def record(self, name: str, kind: str, out: Any, inputs: Tuple[Any, ...],
               layer: Any = None) -> Any:
        import jax.numpy as jnp
        key = occurrence(name, [k for k, _ in self.order])
        self.order.append((key, kind))
        self.values[key] = (out, [x for x in inputs
                                  if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)])
        if layer is not None:
            self.layers[key] = (layer.clone(parent=None), layer.variables)
        self.shapes[key] = (tuple(out.shape), out.dtype)
        return out if self.probes is None else out + self.probes[key]


def capture(step: int, model: str, leaves: Dict[str, Any], loss: Callable[..., Any],
            *args: Any) -> Dict[str, Any]:
    """The capture of the step whose loss is `loss(*args)`: `leaves` the parameter and state
    arrays by name as the step begins, in the model's order; `model` the root call's type."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    shapes = _Recorder(None)
    _ACTIVE.append(shapes)
    try:
        jax.eval_shape(loss, *args)
    finally:
        _ACTIVE.pop()
    probes = {key: jnp.zeros(shape, dtype) for key, (shape, dtype) in shapes.shapes.items()}

    def probed(probes: Dict[str, Any], *args: Any) -> Any:
        rec = _Recorder(probes)
        _ACTIVE.append(rec)
        try:
            value = loss(*args)
        finally:
            _ACTIVE.pop()
        layers.update({key: layer for key, (layer, _) in rec.layers.items()})
        return value, ({key: rec.values[key] for key, _ in rec.order},
                       {key: variables for key, (_, variables) in rec.layers.items()})

    layers: Dict[str, Any] = {}  # the unbound layers of the traced taps
    (_, (seen, variables)), grads = jax.jit(jax.value_and_grad(probed, has_aux=True))(
        probes, *args)

    def host(x: Any) -> Any:
        return np.asarray(jax.device_get(x))

    taps = [(key, kind, host(seen[key][0]), [host(x) for x in seen[key][1]], host(grads[key]),
             _referee(layers[key], variables[key], seen[key][1], host(seen[key][0]))
             if key in layers else None)
            for key, kind in shapes.order]
    return record(step, model, {name: host(leaf) for name, leaf in leaves.items()}, taps)


def _referee(layer: Any, variables: Any, inputs: List[Any], out: Any) -> Dict[str, Any]:
    """The flax layer applied again in its own dtype and in float64 (module docstring)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from .locate_arrays import ulps

    try:
        again = np.asarray(layer.apply(variables, *[jnp.array(x) for x in inputs]))
        replay_exact = again.dtype == out.dtype and again.tobytes() == out.tobytes()
        x64 = getattr(jax, "enable_x64", None)
        with (x64(True) if x64 is not None else jax.experimental.enable_x64()):
            def wide(a: Any) -> Any:
                a = np.asarray(a)
                return jnp.asarray(a, jnp.float64) if a.dtype.kind == "f" else jnp.asarray(a)

            wide_layer = layer.clone(dtype=jnp.float64) if hasattr(layer, "dtype") else layer
            exact = np.asarray(wide_layer.apply(jax.tree_util.tree_map(wide, variables),
                                                *[wide(x) for x in inputs]), dtype=np.float64)
        worst, mean = ulps(out, exact)
        return {"replay_exact": bool(replay_exact), "max_ulp": worst, "mean_ulp": mean}
    except Exception as exc:  # noqa: BLE001 - a layer that cannot be replayed says why
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
