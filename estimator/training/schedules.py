"""Learning-rate schedules, in global steps.

``learning_rate(step, ...)`` builds the rate from TensorFlow ops, so the same
function runs inside ``model_fn`` (graph mode) and eagerly in tests. The step
numbers it needs come from the small pure functions above it.

* ``piecewise``: the original tutorial's schedule (He et al. 2016 in epochs):
  the rate times 1, 0.1, 0.01, 0.002 after epochs 82, 123 and 300.
* ``cosine``: from the peak down to 0 at the last step along half a cosine
  (Loshchilov & Hutter 2017, SGDR, without restarts).
* ``onecycle``: up linearly during warm-up, then linearly down to 0 at the last
  step (Smith & Topin 2018, "super-convergence"; the triangle airbench uses).

Every schedule may start with a linear warm-up (Goyal et al. 2017): step ``s``
of the ``W`` warm-up steps uses ``peak * (s + 1) / W``, so the last warm-up step
reaches the peak. Piecewise boundaries follow the tutorial's convention: a
boundary step still uses the rate before it.

``ImageSizes`` (at the end) is the other schedule of a run: the side of the
training images under ``--progressive-resize``, a function of the fraction of
training done, as the time budget's rates are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from estimator.common.options import LrScaling, LrSchedule

# TensorFlow is imported in the functions that build tensors: ``HParams`` imports this module, and the cloud
# tools import ``HParams`` without TensorFlow (seconds).

SCHEDULES = LrSchedule.values()
SCALINGS = LrScaling.values()
# The schedules a time budget can plan: they decay to 0 at the end of the plan.
BUDGET_SCHEDULES = (LrSchedule.COSINE.value, LrSchedule.ONECYCLE.value)

# He et al. 2016 divide the rate by 10 at 32k and 48k iterations of batch 128
# on 45k images; the original tutorial expressed that in epochs (82, 123) and
# added a last decay at epoch 300, with rates x1, x0.1, x0.01, x0.002.
DECAY_EPOCHS = (82, 123, 300)
DECAY_FACTORS = (1.0, 0.1, 0.01, 0.002)

# The batch that --learning-rate refers to under --lr-scaling linear: the
# tutorial's default rate 0.1 belongs to batch 128 (He et al. 2016). Goyal et
# al. 2017 state the same rule per 256 images with rate 0.1 for ImageNet.
REFERENCE_BATCH = 128

# onecycle without --warmup-epochs rises over the first 20% of training
# (airbench rises over about a fifth of its run).
ONECYCLE_WARMUP_FRACTION = 0.2


def examples_per_step(batch_size: int, num_workers: int, sync: bool) -> int:
    """Training images behind one increment of the global step.

    Synchronous replicas apply one update aggregated from every worker's batch;
    asynchronous workers each increment the global step for their own batch.
    """
    return batch_size * num_workers if sync else batch_size


def steps_per_epoch(num_train_examples: int, global_batch: int) -> int:
    """Global steps in one pass over the training set (at least 1)."""
    return max(1, num_train_examples // global_batch)


def epochs_to_steps(epochs: float, num_train_examples: int, global_batch: int) -> int:
    """Global steps for ``epochs`` passes over the training set, rounded up."""
    return max(1, int(math.ceil(epochs * num_train_examples / global_batch - 1e-9)))


def peak_learning_rate(learning_rate: float, global_batch: int, scaling: str = "none") -> float:
    """The rate the schedule starts from (after warm-up): scaled with the batch if asked."""
    if scaling not in SCALINGS:
        raise ValueError("lr scaling %r is not one of %s." % (scaling, ", ".join(SCALINGS)))
    if scaling == LrScaling.LINEAR:
        return learning_rate * global_batch / REFERENCE_BATCH
    return learning_rate


def warmup_steps(schedule: str, warmup_epochs, total_steps: int, num_train_examples: int, global_batch: int) -> int:
    """Warm-up length in global steps; ``warmup_epochs`` None means the schedule's default."""
    if warmup_epochs is None:
        if schedule == LrSchedule.ONECYCLE:
            return max(1, int(round(ONECYCLE_WARMUP_FRACTION * total_steps)))
        return 0
    if warmup_epochs == 0:
        return 0
    return min(total_steps, epochs_to_steps(warmup_epochs, num_train_examples, global_batch))


def step_decay_factors(num_boundaries: int):
    """x0.1 after each of ``--lr-decay-steps`` (He et al. 2016: 0.1, 0.01)."""
    return [0.1 ** (k + 1) for k in range(num_boundaries)]


def piecewise_boundaries(num_train_examples: int, global_batch: int):
    """Global steps after which the piecewise schedule decays (epochs 82, 123, 300)."""
    per_epoch = steps_per_epoch(num_train_examples, global_batch)
    return [per_epoch * epochs for epochs in DECAY_EPOCHS]


def learning_rate(
    step, schedule: str, peak: float, total_steps: int, warmup: int = 0, boundaries=(), factors=DECAY_FACTORS[1:]
):
    """The learning rate at global step ``step`` (an integer tensor), as a float32 tensor.

    Args:
      step: the global step being taken (0 for the first update).
      schedule: one of ``SCHEDULES``.
      peak: the rate after warm-up (``peak_learning_rate``).
      total_steps: the run's last global step (``--train-steps``): cosine and
        onecycle reach 0 there.
      warmup: warm-up steps (``warmup_steps``).
      boundaries: for ``piecewise``, the steps after which it decays.
      factors: for ``piecewise``, the rate after each boundary as a fraction of the peak.
    """
    import tensorflow as tf

    if schedule not in SCHEDULES:
        raise ValueError("lr schedule %r is not one of %s." % (schedule, ", ".join(SCHEDULES)))
    # float64: exact at every step a run can reach; the rate is cast at the end.
    s = tf.cast(step, tf.float64)
    if schedule == LrSchedule.PIECEWISE:
        rate = tf.constant(peak * DECAY_FACTORS[0], tf.float64)
        if len(factors) < len(boundaries):
            raise ValueError("%d boundaries need %d factors, got %s." % (len(boundaries), len(boundaries), factors))
        for boundary, factor in zip(boundaries, factors):
            rate = tf.where(s > boundary, tf.constant(peak * factor, tf.float64), rate)
    else:
        span = float(max(1, total_steps - warmup))
        progress = tf.clip_by_value((s - warmup) / span, 0.0, 1.0)
        if schedule == LrSchedule.COSINE:
            rate = peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
        else:
            rate = peak * (1.0 - progress)
    if warmup > 0:
        rate = tf.where(s < warmup, peak * (s + 1.0) / warmup, rate)
    return tf.cast(rate, tf.float32)


def learning_rate_at_progress(progress, schedule: str, peak: float, warmup_fraction: float = 0.0):
    """The rate at ``progress`` (the fraction of a time-budget plan done, a float64 tensor in 0..1).

    ``estimator.training.time_budget`` re-plans the number of steps as speed drifts, so a
    budgeted run's schedule is a function of the progress: it stays continuous
    across re-plans and reaches 0 at the end of the budget. Warm-up rises
    linearly over the first ``warmup_fraction`` of the plan.
    """
    import tensorflow as tf

    if schedule not in BUDGET_SCHEDULES:
        raise ValueError(
            "a time budget needs a schedule that decays to 0 at its end (cosine or onecycle), not %r." % schedule
        )
    p = tf.cast(progress, tf.float64)
    decay = tf.clip_by_value((p - warmup_fraction) / max(1e-12, 1.0 - warmup_fraction), 0.0, 1.0)
    if schedule == LrSchedule.COSINE:
        rate = peak * 0.5 * (1.0 + tf.cos(math.pi * decay))
    else:
        rate = peak * (1.0 - decay)
    if warmup_fraction > 0:
        rate = tf.where(p < warmup_fraction, peak * p / warmup_fraction, rate)
    return tf.cast(rate, tf.float32)


@dataclass(frozen=True)
class Schedule:
    """A run's learning-rate schedule, resolved to global steps (saved in hparams.json).

    ``boundaries``/``factors``: for ``piecewise``, the steps after which the
    rate decays and the rate after each as a fraction of ``peak``.
    """

    name: str
    peak: float
    total_steps: int
    warmup: int = 0
    boundaries: tuple = ()
    factors: tuple = ()
    # A time budget's: the rate is a function of the fraction of the plan done, and the
    # warm-up a fraction of the plan (total_steps, unknown in advance, is 0).
    by_progress: bool = False
    warmup_fraction: float = 0.0

    @classmethod
    def resolve(
        cls,
        name: str,
        learning_rate: float,
        scaling: str,
        total_steps: int,
        warmup_epochs,
        decay_steps,
        num_train_examples: int,
        global_batch: int,
        by_progress: bool = False,
    ) -> Schedule:
        """From the flags: ``--lr-decay-steps`` (x0.1 each) or the tutorial's epochs for piecewise."""
        peak = peak_learning_rate(learning_rate, global_batch, scaling)
        if by_progress:
            fraction = ONECYCLE_WARMUP_FRACTION if name == LrSchedule.ONECYCLE else 0.0
            return cls(name, peak, 0, 0, by_progress=True, warmup_fraction=fraction)
        boundaries, factors = (), ()
        if name == LrSchedule.PIECEWISE and decay_steps:
            boundaries, factors = tuple(decay_steps), tuple(step_decay_factors(len(decay_steps)))
        elif name == LrSchedule.PIECEWISE:
            boundaries = tuple(piecewise_boundaries(num_train_examples, global_batch))
            factors = DECAY_FACTORS[1:]
        return cls(
            name,
            peak,
            total_steps,
            warmup_steps(name, warmup_epochs, total_steps, num_train_examples, global_batch),
            boundaries,
            factors,
        )

    @property
    def values(self):
        """The piecewise rates: the peak, then one after each boundary (empty for the others)."""
        return [self.peak] + [self.peak * f for f in self.factors] if self.boundaries else []

    def learning_rate(self, step, progress=None):
        """The rate at ``step`` (an integer tensor), a float32 tensor (``learning_rate``); a
        budgeted schedule's at ``progress`` (``progress_tensor``)."""
        if self.by_progress:
            return learning_rate_at_progress(progress, self.name, self.peak, self.warmup_fraction)
        return learning_rate(step, self.name, self.peak, self.total_steps, self.warmup, self.boundaries, self.factors)


def progress_tensor(global_step):
    """The fraction of the plan done at ``global_step`` (a float64 tensor), from local variables that
    ``budget.hooks.BudgetHook`` loads (``plan_loader``). Called again in the same graph (for another reading of
    the step), it reuses them.
    """
    import tensorflow as tf

    v1 = tf.compat.v1

    def local(name, value):
        return v1.get_variable(
            name,
            [],
            tf.float64,
            initializer=v1.constant_initializer(value),
            trainable=False,
            collections=[v1.GraphKeys.LOCAL_VARIABLES],
        )

    with v1.variable_scope("time_budget", reuse=v1.AUTO_REUSE):
        anchor_step, anchor_progress, total = local("anchor_step", 0), local("anchor_progress", 0), local("total", 1)
        if not v1.get_collection("time_budget_plan"):  # one loader for the graph
            feeds = [
                v1.placeholder(tf.float64, [], name=n) for n in ("new_anchor_step", "new_anchor_progress", "new_total")
            ]
            load = tf.group(
                *[v1.assign(v, f) for v, f in zip((anchor_step, anchor_progress, total), feeds)], name="load_plan"
            )
            for item in [load] + feeds:
                v1.add_to_collection("time_budget_plan", item)
    s = tf.cast(global_step, tf.float64)
    done = tf.clip_by_value((s - anchor_step) / tf.maximum(tf.constant(1.0, tf.float64), total - anchor_step), 0.0, 1.0)
    return anchor_progress + (1.0 - anchor_progress) * done


def plan_loader(graph):
    """``(op, feeds)`` that load a plan into the graph of ``progress_tensor``, or None."""
    found = graph.get_collection("time_budget_plan")
    return (found[0], found[1:]) if found else None


# --progressive-resize: the side of the images the network trains on grows in steps of this many
# pixels (fewer distinct shapes: each is a new set of oneDNN kernels), and never below this side
# (the airbench network's maps would vanish: 16 pixels end as 1x1 maps after its three pools).
RESIZE_STEP = 4
MIN_RESIZE = 16
# --progressive-resize-until: full size from this fraction of training on (the rest of the run
# trains, and batch norm settles, at the size the network is evaluated at).
RESIZE_UNTIL = 0.5


@dataclass(frozen=True)
class ImageSizes:
    """Progressive resizing (fast.ai's DAWNBench ImageNet runs; FFCV's ResNet-50 schedules): training
    images are scaled down to ``start`` pixels a side at first, grow linearly with the fraction of
    training done to ``full`` at ``until`` (in steps of ``RESIZE_STEP`` pixels), and stay at
    ``full`` from there; evaluation always sees ``full``. A step's time scales with its pixels
    (airbench, bf16, batch 512 on a Zen 5, ``benchmarks.step_profile --image-sizes``: 1.30x the images/s
    at 28 pixels, 1.91x at 24, 2.60x at 20, 3.45x at 16, against the pixels' 1.31, 1.78, 2.56 and 4), so
    the early steps are cheaper and a time budget buys more; where the share is off (16 pixels), the
    re-plans correct the plan as the larger steps come.
    """

    start: int
    until: float = RESIZE_UNTIL
    full: int = 32

    def size_at(self, progress: float) -> int:
        """The side at ``progress`` (the fraction of training done, 0..1)."""
        if progress >= self.until:
            return self.full
        grown = (self.full - self.start) * max(0.0, progress) / self.until
        return min(self.full, self.start + int(grown // RESIZE_STEP) * RESIZE_STEP)

    def changes(self):
        """``[(progress, side), ...]``: where each side begins (the first at 0, the last ``full``)."""
        points = [(0.0, self.start)]
        for side in range(self.start + RESIZE_STEP, self.full, RESIZE_STEP):
            points.append(((side - self.start) * self.until / (self.full - self.start), side))
        return points + [(self.until, self.full)]

    def cost_at(self, progress: float) -> float:
        """A step's time at ``progress`` relative to one at full size: its share of the pixels."""
        return (self.size_at(progress) / self.full) ** 2

    def mean_cost(self, start: float, end: float = 1.0) -> float:
        """The mean of ``cost_at`` from progress ``start`` to ``end`` (exact: it is a step function)."""
        start, end = max(0.0, start), min(1.0, end)
        if end <= start:
            return self.cost_at(start)
        points = self.changes() + [(1.0, None)]
        total = 0.0
        for (begin, side), (finish, _) in zip(points, points[1:]):
            overlap = min(end, finish) - max(start, begin)
            if overlap > 0:
                total += overlap * (side / self.full) ** 2
        return total / (end - start)

    def size_tensor(self, progress):
        """``size_at`` in the graph: an int32 tensor from a float64 ``progress`` tensor."""
        import tensorflow as tf

        p = tf.maximum(tf.cast(progress, tf.float64), 0.0)
        grown = (self.full - self.start) * p / self.until
        side = self.start + tf.math.floordiv(grown, float(RESIZE_STEP)) * RESIZE_STEP
        side = tf.where(p >= self.until, tf.constant(self.full, tf.float64), tf.minimum(side, float(self.full)))
        return tf.cast(side, tf.int32)
