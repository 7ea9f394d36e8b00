"""GELU as two XLA-compiled kernels (forward, gradient) with tf.nn.gelu's values and gradient."""

from __future__ import annotations

import tensorflow as tf

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


# tf.nn.gelu is a dozen element-wise passes in Eigen, slow in bf16 (docs/speed.md); XLA compiles each of these
# two functions into one loop, in float32 whatever the activations' type, as tf.nn.gelu computes per op.
@tf.function(jit_compile=True)
def _gelu_forward(x):
    x32 = tf.cast(x, tf.float32)
    return tf.cast(x32 * (0.5 + 0.5 * tf.math.erf(x32 * _SQRT_HALF)), x.dtype)


@tf.function(jit_compile=True)
def _gelu_gradient(x, dy):
    # d/dx x * Phi(x) = Phi(x) + x * phi(x)
    x32 = tf.cast(x, tf.float32)
    cdf = 0.5 + 0.5 * tf.math.erf(x32 * _SQRT_HALF)
    pdf = tf.exp(-0.5 * tf.square(x32)) * _INV_SQRT_2PI
    return tf.cast(tf.cast(dy, tf.float32) * (cdf + x32 * pdf), dy.dtype)


@tf.custom_gradient
def _fused_gelu(x):
    return _gelu_forward(x), lambda dy: _gelu_gradient(x, dy)


def fused_gelu(x):
    """tf.nn.gelu's values and gradient (exact GELU, with erf), as two XLA-compiled kernels.

    Training and evaluation graphs use it; exported models keep tf.nn.gelu's plain ops
    (``fused_activation=False``: a SavedModel then needs no XLA where it is served)."""
    with tf.name_scope("FusedGelu"):
        return _fused_gelu(x)
