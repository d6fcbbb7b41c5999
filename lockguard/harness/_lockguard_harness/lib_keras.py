"""The Keras scenario: a model built from Keras layers with Keras' own defaults.

    keras.cnn   keras.Sequential of Conv2D(16, 3, padding="same") -> BatchNormalization ->
                ReLU -> MaxPooling2D -> Conv2D(32, 3, padding="same") -> BatchNormalization ->
                ReLU -> GlobalAveragePooling2D -> Dropout(0.2) -> Dense(10), every argument
                not named here Keras' default (glorot_uniform kernels, zero biases, BatchNorm
                momentum 0.99 and epsilon 1e-3), initialised by Keras under
                keras.utils.set_random_seed(seed); trained on gen.image_data (NHWC) with
                keras.losses.SparseCategoricalCrossentropy(from_logits=True) and
                keras.optimizers.Adam(1e-3) in a GradientTape step inside tf.function; probe:
                inference-mode logits; the digest covers model.weights (BatchNorm's moving
                statistics included) in Keras' order

Keras' defaults are what a Keras release moves (initialisers, BatchNorm's momentum and epsilon,
the optimizer's update, dropout's RNG), with TensorFlow untouched. Every TensorFlow lock pins
Keras 3, so this runs beside the tf.* scenarios. A keras.applications model was the first
choice and was measured too slow for that: tracing MobileNetV3Small's training step took 37 to
77 s on a 2-core runner, its eager steps 4 s each.

Runs inside the target environment (stdlib, numpy, tensorflow, keras); imported by run.py after
tf_.setup.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Dict

# Keras 3 runs on the backend this names; the tensorflow harness trains on TensorFlow.
os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from . import gen, tf_  # noqa: E402
from .common import (global_norm, host_floats, le_bytes, record_libraries,  # noqa: E402
                     sum_squares)
from .locate_tf import capture, keras_chain  # noqa: E402


def _model() -> Any:
    c = gen.IMAGES
    layers = keras.layers
    return keras.Sequential([
        keras.Input(shape=(c["size"], c["size"], 3)),
        layers.Conv2D(16, 3, padding="same"),
        layers.BatchNormalization(),
        layers.ReLU(),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, padding="same"),
        layers.BatchNormalization(),
        layers.ReLU(),
        layers.GlobalAveragePooling2D(),
        layers.Dropout(0.2),
        layers.Dense(c["classes"]),
    ], name="lockguard_cnn")


def _cnn(ctx) -> None:
    keras.utils.set_random_seed(ctx.seed)
    x_t, labels, probe_t = gen.image_data(ctx.seed)

    def nhwc(t: gen.Tensor) -> Any:
        shape, flat = t
        return tf.constant(np.array(flat, dtype=np.float32).reshape(shape).transpose(0, 2, 3, 1))

    with tf.device(tf_._STATE["device"]):
        model = _model()
        x, probe = nhwc(x_t), nhwc(probe_t)
        y = tf.constant(np.array(labels, dtype=np.int32))
        loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = keras.optimizers.Adam(learning_rate=1e-3)
        variables = model.trainable_variables
        optimizer.build(variables)

        @tf.function
        def train_step() -> Any:
            with tf.GradientTape() as tape:
                loss = loss_obj(y, model(x, training=True))
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables))
            return loss, grads

        for step in range(ctx.steps):
            start = time.perf_counter()
            if step == getattr(ctx, "locate_step", None):
                # A localisation run records the step layer by layer as its weights enter it;
                # the dropout layer's RNG state and BatchNorm's statistics are put back after.
                ctx.result["capture"] = capture(
                    step, "keras.Sequential", {str(getattr(v, "path", None) or v.name): v
                                               for v in model.weights},
                    lambda: loss_obj(y, keras_chain(model, x)), list(model.variables))
            loss, grads = train_step()
            value = float(loss.numpy())  # waits for the step
            seconds = time.perf_counter() - start
            ctx.record_step(value, global_norm([g.numpy() for g in grads]), seconds)
        ctx.set_outputs(*host_floats(np.asarray(model(probe, training=False))))
        weights = [(str(getattr(v, "path", None) or v.name), np.asarray(v.numpy()))
                   for v in model.weights]
    ctx.set_params([(name, le_bytes(a)) for name, a in weights],
                   {name: math.sqrt(sum_squares(a)) for name, a in weights})
    ctx.result["compile"] = {"traces": {"train_step": tf_._tracing_count(train_step)},
                             "xla": False}
    record_libraries(ctx, ("keras",), backend=keras.backend.backend())


SCENARIOS: Dict[str, Callable[[Any], None]] = {
    "keras.cnn": _cnn,
}
