"""ResNetCifar10: the 6n+2-layer ResNets of He et al. 2016 (arXiv:1512.03385, Sec. 4.2).

A 3x3 convolution with 16 filters, then three stages of n residual units on
32x32, 16x16 and 8x8 maps with 16, 32 and 64 filters, global average pooling
and a 10-way fully connected layer: 6n+2 weighted layers (20, 32, 44, 56, 110).
With the default v1 units and option-A shortcuts the parameter counts match
Table 6 of the paper (0.27M, 0.46M, 0.66M, 0.85M, 1.7M). The pre-activation
bottleneck variant (He et al. 2016b) has 9n+2 layers (164 = 9*18+2).
"""

from __future__ import annotations

import tensorflow as tf

from estimator.common.options import Precision, ResNetVersion, check_depth
from estimator.data import records as fmt
from estimator.networks import layers

VERSIONS = ResNetVersion.values()


def check_width(multiplier: float) -> float:
    """Returns the width multiplier, or raises ValueError: the option-A shortcut pads half the new
    channels on each side, so 16 x multiplier must be even (8 x multiplier a whole number)."""
    if not multiplier > 0 or abs(8 * multiplier - round(8 * multiplier)) > 1e-9:
        raise ValueError(
            "width multiplier %s must be positive with 8 x it a whole number (e.g. 0.5, 1, 1.5, 2)." % multiplier
        )
    return multiplier


class ResNetCifar10(layers.Network):
    """A CIFAR-10 ResNet of ``num_layers`` = 6n+2 layers with 10 logits."""

    def __init__(
        self,
        num_layers: int,
        is_training: bool,
        batch_norm_decay: float,
        batch_norm_epsilon: float,
        data_format: str = "channels_first",
        version: str = "v1",
        precision: str = Precision.FP32,
        width_multiplier: float = 1.0,
        filter_gradients=None,
    ):
        super().__init__(is_training, data_format, batch_norm_decay, batch_norm_epsilon, precision, filter_gradients)
        self.n = check_depth(num_layers, version)
        self.version = version
        self.num_classes = fmt.NUM_CLASSES
        base = [16, 64, 128, 256] if version == ResNetVersion.BOTTLENECK_V2 else [16, 16, 32, 64]
        self.filters = [int(round(f * check_width(width_multiplier))) for f in base]
        self.strides = [1, 2, 2]

    def forward_pass(self, x, input_data_format="channels_last"):
        """Float32 logits ``[batch, 10]`` for float32 images ``x`` with values 0..255."""
        if input_data_format not in layers.DATA_FORMATS:
            raise ValueError("input_data_format %r is not one of %s." % (input_data_format, layers.DATA_FORMATS))
        if input_data_format != self._data_format:
            x = tf.transpose(x, [0, 3, 1, 2] if self._nchw else [0, 2, 3, 1])
        x = tf.cast(x / 128.0 - 1.0, self.compute_dtype)  # as the original: inputs in [-1, 1)
        self.scaled_input = x

        x = self._conv(x, 3, self.filters[0], 1, name="init_conv")
        if self.version == ResNetVersion.V1:
            x = self._relu(self._batch_norm(x, name="init_bn"))
        for stage in range(3):
            for unit in range(self.n):
                in_filter = self.filters[stage] if unit == 0 else self.filters[stage + 1]
                stride = self.strides[stage] if unit == 0 else 1
                name = "stage%d/unit%d" % (stage + 1, unit + 1)
                out_filter = self.filters[stage + 1]
                if self.version == ResNetVersion.V1:
                    x = self._residual_v1(x, 3, in_filter, out_filter, stride, name=name)
                else:
                    unit_fn = self._residual_v2 if self.version == ResNetVersion.V2 else self._bottleneck_residual_v2
                    # The first unit of the network shares the stem's activation.
                    x = unit_fn(
                        x, in_filter, out_filter, stride, activate_before_residual=stage == 0 and unit == 0, name=name
                    )
        if self.version != ResNetVersion.V1:
            x = self._relu(self._batch_norm(x, name="final_bn"))
        x = self._global_avg_pool(x)
        return self._fully_connected(x, self.num_classes)
