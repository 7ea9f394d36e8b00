"""AirbenchCifar10: the network of Keller Jordan's airbench94 (arXiv:2404.00498), for short runs.

Not a ResNet: a 2x2 convolution fixed to whiten the image's 2x2 patches (24 filters: 12
whitening directions and their negatives), then three groups of (3x3 convolution, 2x2 max
pool, batch norm, GELU, 3x3 convolution, batch norm, GELU) with 64, 256 and 256 filters, a
max pool over the last 3x3 maps (any size: ``--progressive-resize``) and a linear layer whose
logits are scaled by 1/9. Batch norm has no scale (its
shift is the layer's only parameter); the 3x3 convolutions start with their first filters as
identities ("dirac" initialisation). About as many FLOPs per image as ResNet-14 at twice the
width, and it learns much more per epoch: airbench reaches 94% on CIFAR-10 (original pixels,
with test-time flips and translations) in 10 epochs.

What this package takes from airbench is the network and its initialisation; its training
recipe (label smoothing 0.2, Nesterov momentum 0.85, shifts of 2 pixels, test-time flips and
translations, Lookahead: ``--lookahead``) is spelled out in flags (recipes/cpu_5min.args); its
alternating flips, the 64x learning rate of the batch-norm shifts and ReLU in GELU's place were
tried and retired (docs/experiments.md). ``--group-depth 3`` gives each group airbench96's third convolution, with the
group's first activation added back before the last one (a residual around the last two
convolutions). Left out: freezing the whitening bias after 3 epochs.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from estimator.common import options
from estimator.data import records as fmt
from estimator.networks import layers
from estimator.ops import gelu

v1 = tf.compat.v1

WIDTHS = (64, 256, 256)
WHITEN_SIZE = 2  # patch side of the whitening convolution
WHITEN_FILTERS = 2 * fmt.DEPTH * WHITEN_SIZE**2  # each direction and its negative: 24
# Added to each eigenvalue, relative to their mean: keeps the nearly flat directions of the
# patches from being blown up (airbench's 5e-4, on its inputs of unit variance per channel);
# ten times it cost 0.45 points at 30 minutes on the JPEG stand-in (docs/experiments.md).
WHITEN_EPS = 5e-4
# Images whose patches estimate the covariance (airbench: 5,000).
WHITEN_IMAGES = 5000
LOGIT_SCALE = 1.0 / 9.0
GROUP_DEPTHS = options.GROUP_DEPTHS


def scale_input(images, dtype=tf.float32):
    """What the network sees of images with values 0..255 (as ResNetCifar10: [-1, 1))."""
    return tf.cast(images / 128.0 - 1.0, dtype)


def whitening_kernel(images, eps=WHITEN_EPS):
    """The fixed ``[2, 2, 3, 24]`` kernel that whitens the 2x2 patches of ``images``.

    ``images``: float32 ``[N, 32, 32, 3]`` with values 0..255. The 12 eigenvectors of the
    patches' (uncentred) covariance, each divided by the square root of its eigenvalue (plus
    ``eps`` times their mean), then the same 12 negated: convolved with the scaled
    images, the first 12 outputs have about unit variance and no correlation.
    """
    x = scale_input(images)
    patches = tf.image.extract_patches(
        x, [1, WHITEN_SIZE, WHITEN_SIZE, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID"
    )  # [N, 31, 31, 12], each patch as (row, column, channel): a kernel's layout
    flat = tf.cast(tf.reshape(patches, [-1, WHITEN_FILTERS // 2]), tf.float64)
    covariance = tf.matmul(flat, flat, transpose_a=True) / tf.cast(tf.shape(flat)[0], tf.float64)
    eigenvalues, eigenvectors = tf.linalg.eigh(covariance)  # columns are the eigenvectors
    scaled = eigenvectors / tf.sqrt(eigenvalues + eps * tf.reduce_mean(eigenvalues))[tf.newaxis, :]
    kernel = tf.concat([scaled, -scaled], axis=1)
    return tf.cast(tf.reshape(kernel, [WHITEN_SIZE, WHITEN_SIZE, fmt.DEPTH, WHITEN_FILTERS]), tf.float32)


def dirac_initializer(shape, dtype=tf.float32, partition_info=None):
    """PyTorch's default convolution init (uniform within 1/sqrt(fan in)), with the first
    min(in, out) filters replaced by identities: the convolution starts by passing its input on.

    The identities are built in the graph (an identity matrix padded to the kernel's centre tap),
    not stored in it: as constants, each 3x3x256x256 kernel put 2.4 MB into the graph (9 MB as text),
    12.8 MB in all for airbench96's network, written again into graph.pbtxt, the events file, every
    checkpoint's .meta and every export.
    """
    del partition_info
    size, _, fan_in_channels, filters = shape
    bound = 1.0 / np.sqrt(size * size * fan_in_channels)
    uniform = v1.random_uniform(shape, -bound, bound, dtype)
    centre, after = size // 2, size - 1 - size // 2
    identity = tf.pad(
        tf.eye(fan_in_channels, filters, dtype=dtype)[tf.newaxis, tf.newaxis],
        [[centre, after], [centre, after], [0, 0], [0, 0]],
    )
    is_identity = tf.range(filters) < min(fan_in_channels, filters)  # broadcast over the last axis
    return tf.where(is_identity, identity, uniform)


class AirbenchCifar10(layers.Network):
    """Airbench94's network with 10 logits; ``width_multiplier`` scales its 64/256/256 filters, or ``widths`` names
    each group's;
    ``group_depth`` 3 makes its groups airbench96's (three convolutions, a residual around the last two).

    ``whitening``: the whitening kernel's initial value (``whitening_kernel`` of training images),
    used when variables are initialised (a checkpoint restores it instead). None (evaluation,
    export, speed probes): a placeholder initial value (``dirac_initializer``'s), which a restored
    checkpoint replaces. ``fused_activation``: GELU as ``fused_gelu`` (training, evaluation) or as
    tf.nn.gelu's plain ops (exported models).
    """

    def __init__(
        self,
        is_training: bool,
        batch_norm_decay: float,
        batch_norm_epsilon: float,
        data_format: str = "channels_last",
        precision: str = options.Precision.FP32,
        width_multiplier: float = 1.0,
        whitening=None,
        group_depth: int = 2,
        fused_activation: bool = True,
        filter_gradients=None,
        widths=None,
    ):
        super().__init__(is_training, data_format, batch_norm_decay, batch_norm_epsilon, precision, filter_gradients)
        self.num_classes = fmt.NUM_CLASSES
        self.widths = list(widths or [int(round(w * width_multiplier)) for w in WIDTHS])
        self.whitening = whitening
        self._activation = gelu.fused_gelu if fused_activation else tf.nn.gelu
        if group_depth not in GROUP_DEPTHS:
            raise ValueError("group_depth %r is not one of %s." % (group_depth, GROUP_DEPTHS))
        self.group_depth = group_depth

    def _act(self, x):
        y = self._activation(x)
        self.relu_outputs.append(y)  # what the health rules watch as activations
        return y

    def _max_pool(self, x, size: int):
        if not self._nchw:
            return tf.nn.max_pool2d(x, size, size, "VALID")
        # Pooled in NHWC between two transposes: TensorFlow 2.15's oneDNN MaxPool gives wrong values
        # for NCHW on the CPU (off by up to 2.4 on random inputs; its plain CPU kernel refuses NCHW),
        # and tests compare the formats on the CPU. On GPUs this costs two transposes per pool.
        y = tf.nn.max_pool2d(tf.transpose(x, [0, 2, 3, 1]), size, size, "VALID")
        return tf.transpose(y, [0, 3, 1, 2])

    def _dirac_conv(self, x, filters: int, name: str):
        in_filters = int(x.shape[self._channel_axis])
        with v1.variable_scope(name):
            kernel = v1.get_variable("kernel", [3, 3, in_filters, filters], initializer=dirac_initializer)
        return self._conv2d(x, tf.cast(kernel, x.dtype), 1, "SAME")

    def _whiten(self, x):
        with v1.variable_scope("whiten"):
            shape = [WHITEN_SIZE, WHITEN_SIZE, fmt.DEPTH, WHITEN_FILTERS]
            if self.whitening is not None:
                kernel = v1.get_variable("kernel", initializer=self.whitening, trainable=False)
            else:
                kernel = v1.get_variable("kernel", shape, initializer=dirac_initializer, trainable=False)
            bias = v1.get_variable("bias", [WHITEN_FILTERS], initializer=v1.zeros_initializer())
        y = tf.nn.conv2d(x, tf.cast(kernel, x.dtype), 1, "VALID", data_format="NCHW" if self._nchw else "NHWC")
        return tf.nn.bias_add(y, tf.cast(bias, x.dtype), data_format="NCHW" if self._nchw else "NHWC")

    def forward_pass(self, x, input_data_format="channels_last"):
        """Float32 logits ``[batch, 10]`` for float32 images ``x`` with values 0..255."""
        if input_data_format not in layers.DATA_FORMATS:
            raise ValueError("input_data_format %r is not one of %s." % (input_data_format, layers.DATA_FORMATS))
        if input_data_format != self._data_format:
            x = tf.transpose(x, [0, 3, 1, 2] if self._nchw else [0, 2, 3, 1])
        x = scale_input(x, self.compute_dtype)
        self.scaled_input = x
        x = self._act(self._whiten(x))
        for i, width in enumerate(self.widths):
            with v1.variable_scope("group%d" % (i + 1)):
                x = self._dirac_conv(x, width, "conv1")
                x = self._max_pool(x, 2)
                x = self._act(self._batch_norm(x, name="bn1", scale=False))
                shortcut = x
                x = self._act(self._batch_norm(self._dirac_conv(x, width, "conv2"), name="bn2", scale=False))
                if self.group_depth == 3:  # airbench96: conv3's batch norm plus the shortcut, then GELU
                    x = self._batch_norm(self._dirac_conv(x, width, "conv3"), name="bn3", scale=False)
                    x = self._act(x + shortcut)
        # airbench's 3x3 max pool, over the whole map: 32-pixel images end as 3x3 maps, smaller ones
        # (--progressive-resize) as smaller maps, and each gives one value per channel.
        x = tf.reduce_max(x, axis=[2, 3] if self._nchw else [1, 2])
        x = tf.cast(x, tf.float32)
        with v1.variable_scope("fc"):
            bound = 1.0 / np.sqrt(self.widths[-1])
            w = v1.get_variable(
                "kernel", [self.widths[-1], self.num_classes], initializer=v1.random_uniform_initializer(-bound, bound)
            )
        return tf.matmul(x, w) * LOGIT_SCALE
