"""Building blocks of the CIFAR-10 ResNets (He et al. 2016, arXiv:1512.03385 and 1603.05027).

Graph-mode ``tf.compat.v1`` code, meant to run inside an Estimator ``model_fn``:
variables come from ``tf.compat.v1.get_variable`` so that towers share them
through ``variable_scope(reuse=...)`` and device setters can place them.
Batch-norm moving-average updates go to ``tf.compat.v1.GraphKeys.UPDATE_OPS``.
"""

from __future__ import annotations

import tensorflow as tf

from estimator.common.options import DataFormat, Precision
from estimator.ops import filter_gradient

v1 = tf.compat.v1

DATA_FORMATS = DataFormat.values()

# --precision -> the dtype convolutions and activations compute in. Variables, batch-norm statistics, logits
# and the loss stay float32 (Model Garden's ``official/r1/resnet`` route): checkpoints do not depend on it.
COMPUTE_DTYPES = {Precision.FP32: tf.float32, Precision.BF16: tf.bfloat16, Precision.FP16: tf.float16}


class Network(object):
    """The base of both networks: data formats, compute dtypes, the layers, and the residual units the
    ResNets are made of."""

    def __init__(
        self,
        is_training: bool,
        data_format: str,
        batch_norm_decay: float,
        batch_norm_epsilon: float,
        precision: str = Precision.FP32,
        filter_gradients=None,
    ):
        """
        Args:
          is_training: batch norm uses batch statistics and records moving averages.
          data_format: ``channels_first`` (NCHW, fastest on GPUs) or ``channels_last``
            (NHWC, 3.5x faster on the CPU: docs/speed.md).
          batch_norm_decay: decay of the moving mean and variance.
          batch_norm_epsilon: added to the variance to avoid dividing by zero.
          precision: ``fp32``, ``bf16`` or ``fp16``: the compute dtype of the
            convolutions (``COMPUTE_DTYPES``); variables stay float32.
          filter_gradients: in training, the convolutions whose filter gradients are matrix products
            (``filter_gradient.Recorded`` or ``Measured``); None: TensorFlow's own everywhere.
        """
        if data_format not in DATA_FORMATS:
            raise ValueError("data_format %r is not one of %s." % (data_format, DATA_FORMATS))
        if precision not in COMPUTE_DTYPES:
            raise ValueError("precision %r is not one of %s." % (precision, ", ".join(COMPUTE_DTYPES)))
        self.compute_dtype = COMPUTE_DTYPES[precision]
        self._is_training = is_training
        self._data_format = data_format
        self._batch_norm_decay = batch_norm_decay
        self._batch_norm_epsilon = batch_norm_epsilon
        self._filter_gradients = filter_gradients
        # What the health rules look at (estimator.health.probes): the input
        # after the network's own scaling, and every ReLU's output.
        self.scaled_input = None
        self.relu_outputs = []

    def forward_pass(self, x, input_data_format="channels_last"):
        raise NotImplementedError("forward_pass() is implemented by each network")

    @property
    def _nchw(self) -> bool:
        return self._data_format == DataFormat.CHANNELS_FIRST

    @property
    def _channel_axis(self) -> int:
        return 1 if self._nchw else 3

    def _strides(self, stride: int):
        return [1, 1, stride, stride] if self._nchw else [1, stride, stride, 1]

    # -- layers -------------------------------------------------------------

    def _conv(self, x, kernel_size: int, filters: int, strides: int, name: str = "conv"):
        """Convolution without bias (batch norm follows), He-normal initialised."""
        in_filters = int(x.shape[self._channel_axis])
        padding = "SAME"
        if strides > 1:
            # Pad explicitly so the result does not depend on the input's size parity
            # (as the original tutorial and the Model Garden ResNets do).
            pad = kernel_size - 1
            begin, end = pad // 2, pad - pad // 2
            pads = (
                [[0, 0], [0, 0], [begin, end], [begin, end]]
                if self._nchw
                else [[0, 0], [begin, end], [begin, end], [0, 0]]
            )
            x = tf.pad(x, pads)
            padding = "VALID"
        with v1.variable_scope(name):
            kernel = v1.get_variable(
                "kernel",
                [kernel_size, kernel_size, in_filters, filters],
                # He et al. 2015 (arXiv:1502.01852), the init the ResNet papers use.
                initializer=v1.variance_scaling_initializer(scale=2.0, mode="fan_in", distribution="truncated_normal"),
            )
        # A float32 variable cast where it is used: its gradient comes back float32.
        kernel = tf.cast(kernel, x.dtype)
        return self._conv2d(x, kernel, strides, padding)

    def _conv2d(self, x, kernel, strides: int, padding: str):
        """``tf.nn.conv2d`` in the model's data format; in training, its kernel's gradient is computed
        as matrix products where that was measured faster (``filter_gradient``)."""
        data_format = "NCHW" if self._nchw else "NHWC"
        return filter_gradient.conv2d(
            x, kernel, strides, padding, data_format, self._is_training, self._filter_gradients
        )

    def _batch_norm(self, x, name: str = "bn", scale: bool = True):
        """Batch norm; ``scale=False`` has no scale at all (1: only the shift is learnt, as airbench)."""
        channels = int(x.shape[self._channel_axis])
        with v1.variable_scope(name):
            if scale:
                gamma = v1.get_variable("gamma", [channels], initializer=v1.ones_initializer())
            else:
                gamma = tf.ones([channels], tf.float32)
            beta = v1.get_variable("beta", [channels], initializer=v1.zeros_initializer())
            stat_collections = [v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.MOVING_AVERAGE_VARIABLES]
            moving_mean, moving_variance = (
                v1.get_variable(stat, [channels], trainable=False, initializer=init, collections=stat_collections)
                for stat, init in (("moving_mean", v1.zeros_initializer()), ("moving_variance", v1.ones_initializer()))
            )
        data_format = "NCHW" if self._nchw else "NHWC"
        if not self._is_training:
            y, _, _ = v1.nn.fused_batch_norm(
                x,
                gamma,
                beta,
                mean=moving_mean,
                variance=moving_variance,
                epsilon=self._batch_norm_epsilon,
                data_format=data_format,
                is_training=False,
            )
            return y
        y, mean, variance = v1.nn.fused_batch_norm(
            x, gamma, beta, epsilon=self._batch_norm_epsilon, data_format=data_format, is_training=True
        )
        rate = 1.0 - self._batch_norm_decay
        for var, value in ((moving_mean, mean), (moving_variance, variance)):
            v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, v1.assign_sub(var, (var - value) * rate))
        return y

    def _relu(self, x):
        y = tf.nn.relu(x)
        self.relu_outputs.append(y)
        return y

    def _fully_connected(self, x, out_dim: int, name: str = "fc"):
        with v1.variable_scope(name):
            # Small weights make the initial logits nearly equal, so the loss
            # starts at ln(10) = 2.303 (Karpathy, "A recipe for training
            # neural networks": verify the loss at init).
            w = v1.get_variable(
                "kernel", [int(x.shape[-1]), out_dim], initializer=v1.random_normal_initializer(stddev=0.01)
            )
            b = v1.get_variable("bias", [out_dim], initializer=v1.zeros_initializer())
        return tf.matmul(x, w) + b

    def _avg_pool(self, x, pool_size: int, stride: int):
        """Average pooling, VALID padding.

        Computed as a depthwise convolution with a constant 1/(k*k) kernel:
        TensorFlow 2.15's oneDNN AvgPool gave wrong values now and then here
        when its input came from the preceding residual unit (off by up to 2.7
        in about one run in three, either data format; tests/test_model.py
        compares the two formats), while the depthwise form is exact and as
        fast (4.4 ms against 4.3 ms forward and backward on [128, 32, 32, 16]).
        """
        channels = int(x.shape[self._channel_axis])
        dtype = x.dtype
        if dtype == tf.bfloat16:
            # TensorFlow 2.15 has no oneDNN bf16 kernel for this op's gradient: in bf16 it took 34.6
            # of a 209 ms ResNet-20 step on a Xeon with AMX, in float32 4 ms (benchmarks/step_profile.py).
            x = tf.cast(x, tf.float32)
        kernel = tf.fill([pool_size, pool_size, channels, 1], tf.constant(1.0 / (pool_size * pool_size), x.dtype))
        y = tf.nn.depthwise_conv2d(
            x, kernel, self._strides(stride), "VALID", data_format="NCHW" if self._nchw else "NHWC"
        )
        return tf.cast(y, dtype)

    def _global_avg_pool(self, x):
        """Averages each map in float32: the classifier and the loss stay float32."""
        return tf.reduce_mean(tf.cast(x, tf.float32), axis=[2, 3] if self._nchw else [1, 2])

    def _pad_channels(self, x, in_filter: int, out_filter: int):
        pad = (out_filter - in_filter) // 2
        pads = [[0, 0], [pad, pad], [0, 0], [0, 0]] if self._nchw else [[0, 0], [0, 0], [0, 0], [pad, pad]]
        return tf.pad(x, pads)

    # -- residual units -----------------------------------------------------

    def _residual_v1(self, x, kernel_size, in_filter, out_filter, stride, name="residual_v1"):
        """Post-activation unit of He et al. 2016a, with the parameter-free option-A
        shortcut (average-pool, then zero-pad the new channels) used for CIFAR-10."""
        with v1.variable_scope(name):
            shortcut = x
            x = self._conv(x, kernel_size, out_filter, stride, name="conv1")
            x = self._relu(self._batch_norm(x, name="bn1"))
            x = self._conv(x, kernel_size, out_filter, 1, name="conv2")
            # Goyal et al. 2017: a zero last scale makes each unit start as its shortcut.
            x = self._batch_norm(x, name="bn2")
            if in_filter != out_filter:
                shortcut = self._pad_channels(self._avg_pool(shortcut, stride, stride), in_filter, out_filter)
            return self._relu(x + shortcut)

    def _preactivate(self, x, activate_before_residual: bool):
        """Batch norm and relu opening a pre-activation unit; returns (x, shortcut).

        The shortcut starts after the activation only where the unit is asked to
        share it (the first unit after the stem), else before it.
        """
        activated = self._relu(self._batch_norm(x, name="bn1"))
        return activated, activated if activate_before_residual else x

    def _residual_v2(self, x, in_filter, out_filter, stride, activate_before_residual=False, name="residual_v2"):
        """Pre-activation unit of He et al. 2016b (arXiv:1603.05027)."""
        with v1.variable_scope(name):
            x, shortcut = self._preactivate(x, activate_before_residual)
            x = self._conv(x, 3, out_filter, stride, name="conv1")
            x = self._relu(self._batch_norm(x, name="bn2"))
            x = self._conv(x, 3, out_filter, 1, name="conv2")
            if in_filter != out_filter:
                shortcut = self._pad_channels(self._avg_pool(shortcut, stride, stride), in_filter, out_filter)
            return x + shortcut

    def _bottleneck_residual_v2(
        self, x, in_filter, out_filter, stride, activate_before_residual=False, name="bottleneck_v2"
    ):
        """Pre-activation bottleneck unit (1x1, 3x3, 1x1) with a projection shortcut."""
        with v1.variable_scope(name):
            x, shortcut = self._preactivate(x, activate_before_residual)
            x = self._conv(x, 1, out_filter // 4, 1, name="conv1")
            x = self._relu(self._batch_norm(x, name="bn2"))
            x = self._conv(x, 3, out_filter // 4, stride, name="conv2")
            x = self._relu(self._batch_norm(x, name="bn3"))
            x = self._conv(x, 1, out_filter, 1, name="conv3")
            if in_filter != out_filter or stride != 1:
                shortcut = self._conv(shortcut, 1, out_filter, stride, name="projection")
            return x + shortcut


# The tutorial's name for the base class (``estimator.model_base.ResNet``).
ResNet = Network
