"""The networks ``--network`` names, built from hyperparameters: ``build``, ``describe``.

* ``resnet``: ``estimator.networks.resnet.ResNetCifar10`` (``--num-layers``, ``--resnet-version``);
* ``airbench``: ``estimator.networks.airbench.AirbenchCifar10`` (airbench94's network, or airbench96's
  with ``--group-depth 3``).
"""

from __future__ import annotations

import tensorflow as tf

from estimator.common.options import Network, Precision
from estimator.networks import airbench
from estimator.networks.resnet import ResNetCifar10
from estimator.ops import filter_gradient

# --network: the family of ResNetCifar10 (--num-layers, --resnet-version) or airbench94's network.
NETWORKS = Network.values()


def describe(hp) -> str:
    """The network of ``hp`` in words, for logs and errors: "ResNet-14 v1 x2 wide", "airbench network"."""
    width = "" if hp.width_multiplier == 1 else " x%g wide" % hp.width_multiplier
    if hp.group_widths:
        width = " %s wide" % "/".join(map(str, hp.group_widths))
    if hp.network == Network.AIRBENCH:
        return "airbench network%s%s" % (
            width,
            "" if hp.group_depth == 2 else ", %d convolutions per group" % hp.group_depth,
        )
    return "ResNet-%d %s%s" % (hp.num_layers, hp.resnet_version, width)


def build(hp, is_training: bool, precision: str = None, whitening=None, serving: bool = False, filter_gradients=None):
    """The network ``hp`` names (``hp.network``), at ``precision`` (default ``hp.precision``).

    ``whitening``: for the airbench network, the initial value of its whitening kernel
    (``airbench.whitening_kernel``), used when variables are initialised (training from
    scratch); ignored by ResNets. ``serving``: the graph exported models serve, built from
    TensorFlow's plain ops only (the airbench network's GELU is otherwise XLA-compiled:
    ``estimator.ops.gelu``). ``filter_gradients``: a ``filter_gradient.Measured`` plan (the configuration
    and the speed probes measure it as they build); by default the one ``hp`` recorded.
    """
    precision = precision or hp.precision
    if filter_gradients is None and hp.filter_gradients:
        filter_gradients = filter_gradient.Recorded(hp.filter_gradients)
    if hp.network == Network.AIRBENCH:
        return airbench.AirbenchCifar10(
            is_training,
            hp.batch_norm_decay,
            hp.batch_norm_epsilon,
            hp.data_format,
            precision,
            width_multiplier=hp.width_multiplier,
            whitening=whitening,
            group_depth=hp.group_depth,
            fused_activation=not serving,
            filter_gradients=filter_gradients,
            widths=hp.group_widths,
        )
    if hp.network != Network.RESNET:
        raise ValueError("network %r is not one of %s." % (hp.network, ", ".join(NETWORKS)))
    return ResNetCifar10(
        hp.num_layers,
        is_training=is_training,
        batch_norm_decay=hp.batch_norm_decay,
        batch_norm_epsilon=hp.batch_norm_epsilon,
        data_format=hp.data_format,
        version=hp.resnet_version,
        precision=precision,
        width_multiplier=hp.width_multiplier,
        filter_gradients=filter_gradients,
    )


def forward_flops(hp) -> int:
    """Floating-point operations of one 32-pixel image's forward pass through ``hp``'s network, counted
    by TensorFlow's profiler (a graph of its own; about a second)."""
    v1 = tf.compat.v1
    with tf.Graph().as_default() as graph:
        model = build(hp.replace(precision=Precision.FP32), False, serving=True)
        model.forward_pass(tf.zeros([1, 32, 32, 3]))
        options = v1.profiler.ProfileOptionBuilder.float_operation()
        options["output"] = "none"
        return v1.profiler.profile(graph, options=options).total_float_ops
