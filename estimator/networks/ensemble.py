"""Ensemble: several networks of the same shape trained side by side, their logits averaged.

``--ensemble N`` builds N copies of the network (``cifar10_model.build``), each under a variable
scope of its own (``member1`` ... ``memberN``), each from its own random initialisation, all fed
the same batches. Each member learns from its own loss (``tower_fn`` sums them), never from the
averaged logits: trained through their average, members co-adapt and lose the differences that
make an ensemble gain. Evaluations, exports and predictions use the average of the members' logits.

Why: on these 50,000 images a single network is short of data, not of steps (twice the
30-minute budget bought +0.14 to +0.63, docs/experiments.md), and independently initialised networks
make partly independent errors, which averaging removes. N members cost N times the FLOPs per
image, so under a time budget each member sees 1/N of the epochs. Measured at 30 minutes (Zen 5,
docs/experiments.md): two airbench networks of 14 epochs each score 90.07% and 89.56% alone and 90.54%
together, level with one network of 28 epochs (90.44-90.72%); the recipes train one.
"""

from __future__ import annotations

import tensorflow as tf

v1 = tf.compat.v1

MEMBER_SCOPE = "member%d"


class Ensemble(object):
    """The networks ``members`` (built, not yet run) as one: ``forward_pass`` averages their logits.

    After ``forward_pass``: ``member_logits`` (each member's float32 logits, for their own losses),
    ``relu_outputs`` (every member's, for the health rules) and ``scaled_input`` (the first
    member's: every member scales the input alike).
    """

    def __init__(self, members):
        if len(members) < 2:
            raise ValueError("an ensemble needs at least 2 networks, not %d." % len(members))
        self.members = list(members)
        self.member_logits = []
        self.relu_outputs = []
        self.scaled_input = None

    def forward_pass(self, x, input_data_format="channels_last"):
        """Float32 logits ``[batch, 10]``: the mean of the members' logits for images ``x``."""
        self.member_logits = []
        for i, member in enumerate(self.members):
            with v1.variable_scope(MEMBER_SCOPE % (i + 1)):
                self.member_logits.append(member.forward_pass(x, input_data_format))
        self.relu_outputs = [y for member in self.members for y in member.relu_outputs]
        self.scaled_input = self.members[0].scaled_input
        return tf.add_n(self.member_logits) / float(len(self.members))
