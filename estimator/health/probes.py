"""The tensors the health rules look at, built in ``model_fn`` and fetched only on rule steps.

Nothing here runs unless ``HealthHook`` fetches it: ordinary steps pay for
nothing but the scalar cross-entropy (already computed). On a rule step the
extra work is a few reductions over the gradients (about 0.3 M numbers for
ResNet-20) and one max over each ReLU output of the first tower.

The probes are kept per graph in a weak dictionary rather than a graph
collection: collections are written into every checkpoint's meta graph, and a
dict of tensors cannot be.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from estimator.common import tensor_names
from estimator.common.options import DataFormat

v1 = tf.compat.v1

_PROBES = weakref.WeakKeyDictionary()
BATCH_PICTURE_SIZE = 16


def add(gradvars, learning_rate, weight_decay: float, scaled_input, relus, data_format: str, images, labels) -> None:
    """Registers the probes of this training graph.

    Args:
      gradvars: the averaged (gradient, variable) pairs the optimizer applies.
      learning_rate: the scheduled rate tensor.
      weight_decay: the L2 factor in the loss: the gradient of the data loss is
        ``g - weight_decay * w`` exactly, which is what "vanishing" must look at
        (the decay term alone never vanishes).
      scaled_input: the first tower's input after the network's own scaling.
      relus: the first tower's ReLU outputs.
      images, labels: the training batch as the network receives it (after distortion).
    """
    kernels = [(g, w) for g, w in gradvars if g is not None and w.op.name.endswith("kernel")]
    with tf.name_scope("health"):
        data_grads = [tf.cast(g, tf.float32) - weight_decay * w for g, w in kernels]
        rate = tf.cast(learning_rate, tf.float32)
        mean, variance = tf.nn.moments(tf.cast(scaled_input, tf.float32), axes=[0, 1, 2, 3])
        channel = 1 if data_format == DataFormat.CHANNELS_FIRST else 3
        probes = {
            "grad_mean_abs": tf.stack([tf.reduce_mean(tf.abs(g)) for g in data_grads]),
            "update_ratio": tf.stack([rate * tf.norm(g) / (tf.norm(w) + 1e-12) for g, w in kernels]),
            "grad_norm": tf.linalg.global_norm([g for g, _ in gradvars if g is not None]),
            "relu_active": [tf.reduce_max(r, axis=[a for a in range(4) if a != channel]) > 0 for r in relus],
            "input_mean": mean,
            "input_std": tf.sqrt(variance),
            "images": tf.cast(tf.clip_by_value(images[:BATCH_PICTURE_SIZE], 0, 255), tf.uint8),
            "labels": labels[:BATCH_PICTURE_SIZE],
        }
    _PROBES[v1.get_default_graph()] = {
        "tensors": probes,
        "kernel_names": [tensor_names.layer_name(w.op.name) for _, w in kernels],
        "relu_names": [tensor_names.layer_name(r.op.name) for r in relus],
    }


def get(graph=None):
    """The probes of ``graph`` (default: the current one), or None."""
    return _PROBES.get(graph or v1.get_default_graph())
