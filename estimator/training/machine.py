"""What the graph needs to know about this CPU: the bf16 filter-gradient plan of the training tower.

Measured once per job and recorded in hparams.json (``HParams.filter_gradients``): a restart keeps its first
run's, so that its graph is the one its checkpoints were trained with, on any machine.
"""

from __future__ import annotations

import tensorflow as tf

from estimator.common import tensor_names
from estimator.data import records as fmt
from estimator.networks import registry
from estimator.ops import filter_gradient


def filter_gradient_plan(hp, cpu: dict, measure: bool = True) -> dict:
    """The bf16 filter-gradient plan of ``hp``'s training tower on this CPU: the tower's graph built (no
    session) at each image size training will see (``--progressive-resize``'s, else the full one), each
    candidate convolution's map timed on first use (cached in ``hp.probe_cache``), so that only the maps that
    occur are timed. ``measure`` False: from the cache alone, else the default rule."""
    # The largest images first: their maps decide the most sides of the smaller ones (``Measured``).
    sides = sorted({side for _, side in hp.image_sizes.changes()}, reverse=True) if hp.image_sizes else [fmt.HEIGHT]
    plan = filter_gradient.Measured(hp.probe_cache, cpu, measure=measure)
    for side in sides:
        with tf.Graph().as_default():
            images = tf.compat.v1.placeholder(tf.float32, [hp.train_batch_size // len(hp.towers), side, side, 3])
            with tf.compat.v1.variable_scope(tensor_names.NETWORK_SCOPE):
                registry.build(hp, True, filter_gradients=plan).forward_pass(images)
    return plan.plan
