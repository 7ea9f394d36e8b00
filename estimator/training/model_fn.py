"""The Estimator ``model_fn``: one tower per device, gradients consolidated per variable.

Reading guide (the original's version was known as "here lives a dragon"):

1. ``split_batch`` cuts the global batch into one shard per tower.
2. ``tower_fn`` builds the network (``registry.build``: a ResNet or airbench's) on one shard and
   returns its logits, loss and gradients. Towers share variables (``variable_scope(reuse=...)``).
3. ``average_gradients`` averages each variable's gradients over the towers on
   the variable's own device, so only one tensor per variable crosses devices.
4. ``model_fn`` trains through ``_training_spec``: the learning-rate schedule and the momentum optimizer
   (fp16's loss scaling), the towers, the non-finite flags and what the job's guests add (health probes),
   ``_optimizer_step`` (``SyncReplicasOptimizer`` for ``--sync``, batch-norm updates from the first
   tower, Lookahead) and ``_training_summaries``; it evaluates and predicts with the metrics and
   test-time augmentation (``_tta_probabilities``).

Labels of -1 mark padding in the last evaluation batch: they get zero weight.
"""

from __future__ import annotations

import collections
import functools
import itertools

import tensorflow as tf

from estimator.common import tensor_names
from estimator.common.options import Network, Optimizer, Precision
from estimator.common.tensor_names import (
    CROSS_ENTROPY,
    IMAGE_SIZE,
    LEARNING_RATE,
    MUON_LEARNING_RATE,
    TOTAL_LOSS,
    TRAIN_ACCURACY,
)
from estimator.data import records as fmt
from estimator.data.pipeline import Cifar10DataSet
from estimator.networks import airbench, registry
from estimator.training import devices, eval_metrics, muon, nonfinite, schedules
from estimator.training import hooks as hooks_lib
from estimator.training import hparams as hparams_lib
from estimator.training.guest import TrainingGraph

v1 = tf.compat.v1

# airbench's Lookahead schedule: a sync every 5 steps, pulling back by 0.95^5 x (fraction done)^3.
LOOKAHEAD_EVERY = 5
LOOKAHEAD_MAX_PULL = 0.95**5


def _op_name(tensor_name: str) -> str:
    return tensor_name.split(":")[0]


TowerOutput = collections.namedtuple("TowerOutput", "logits loss cross_entropy grads_and_vars")


def split_batch(tensor, num_shards: int):
    """Splits along the batch axis into ``num_shards`` parts that differ by at most one."""
    if num_shards == 1:
        return [tensor]
    if tensor.shape[0] is not None:
        # Static sizes keep the shards' shapes known to the graph (filter_gradient times by shape).
        base, extra = divmod(int(tensor.shape[0]), num_shards)
        return tf.split(tensor, [base + int(i < extra) for i in range(num_shards)], axis=0)
    size = tf.shape(tensor)[0]
    base, extra = size // num_shards, size % num_shards
    sizes = [base + tf.cast(i < extra, tf.int32) for i in range(num_shards)]
    return tf.split(tensor, tf.stack(sizes), axis=0, num=num_shards)


def example_weights(labels):
    """1 for real images, 0 for padding (label -1)."""
    return tf.cast(tf.not_equal(labels, fmt.PAD_LABEL), tf.float32)


def per_example_cross_entropy(logits, labels, label_smoothing: float = 0.0):
    """Cross-entropy of each example; with smoothing ``e`` the target is (1 - e) one-hot + e / 10."""
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(labels, 0), logits=logits)
    if not label_smoothing:
        return xent
    uniform = -tf.reduce_mean(tf.nn.log_softmax(logits), axis=1)
    return (1.0 - label_smoothing) * xent + label_smoothing * uniform


def tower_fn(
    model,
    images,
    labels,
    weight_decay: float,
    compute_gradients: bool = True,
    label_smoothing: float = 0.0,
    optimizer=None,
    decay_filters: bool = True,
):
    """Builds one tower.

    Args:
      model: a network of ``registry.build`` (``ResNetCifar10``, ``AirbenchCifar10`` or an
        ``Ensemble`` of either).
      images: ``[b, HEIGHT, WIDTH, DEPTH]`` float32, values 0..255, NHWC.
      labels: ``[b]`` int32, or None (PREDICT).
      weight_decay: L2 factor over all trainable variables (as the original).
      compute_gradients: also build the gradients of the loss.
      label_smoothing: smooths the training targets; ``cross_entropy`` stays plain.
      optimizer: when given, gradients come from its ``compute_gradients``
        (the fp16 loss-scale optimizer scales the loss there and unscales the
        gradients); else from ``tf.gradients``.
      decay_filters: False under Muon, whose renormalisation of the filters replaces their weight decay.

    Returns:
      A ``TowerOutput``; its loss fields and gradients are None without labels.
    """
    logits = model.forward_pass(images, input_data_format="channels_last")
    if labels is None:
        return TowerOutput(logits, None, None, None)
    weights = example_weights(labels)
    count = tf.reduce_sum(weights)

    def mean_cross_entropy(of_logits, smoothing=0.0):
        return tf.math.divide_no_nan(
            tf.reduce_sum(per_example_cross_entropy(of_logits, labels, smoothing) * weights), count
        )

    cross_entropy = mean_cross_entropy(logits)  # what evaluation reports, without label smoothing
    objective = mean_cross_entropy(logits, label_smoothing) if label_smoothing else cross_entropy
    params = v1.trainable_variables()
    decayed = [v for v in params if not (decay_filters is False and muon.is_filter(v))]
    loss = objective + weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in decayed])
    grads_and_vars = None
    if compute_gradients and optimizer is not None:
        grads_and_vars = optimizer.compute_gradients(loss, var_list=params)
    elif compute_gradients:
        grads_and_vars = list(zip(tf.gradients(loss, params), params))
    return TowerOutput(logits, loss, cross_entropy, grads_and_vars)


def average_gradients(tower_grads_and_vars):
    """Averages each variable's gradients over the towers, on the variable's device."""
    grads_by_var = collections.OrderedDict()
    for grad, var in itertools.chain(*tower_grads_and_vars):
        if grad is not None:
            grads_by_var.setdefault(var, []).append(grad)
    averaged = []
    with tf.name_scope("gradient_averaging"):
        for var, grads in grads_by_var.items():
            with v1.device(var.device):
                grad = grads[0] if len(grads) == 1 else tf.multiply(tf.add_n(grads), 1.0 / len(grads))
            averaged.append((grad, var))
    return averaged


def predictions_of(logits):
    """What PREDICT returns and exports serve: class ids, their names, probabilities."""
    classes = tf.argmax(logits, axis=1, output_type=tf.int32)
    return {
        "classes": classes,
        "class_names": tf.gather(tf.constant(fmt.CLASS_NAMES), classes),
        "probabilities": tf.nn.softmax(logits, name="softmax_tensor"),
    }


def build_towers(hp: hparams_lib.HParams, images, labels, mode, optimizer=None, reuse=False):
    """Runs ``tower_fn`` on each device; returns (tower outputs, first tower's update ops,
    first tower's model)."""
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    tower_list = hp.towers
    image_shards = split_batch(images, len(tower_list))
    label_shards = split_batch(labels, len(tower_list)) if labels is not None else [None] * len(tower_list)
    params_device = devices.parameter_devices(hp.variable_strategy, tower_list)
    whitening = None
    if is_training and hp.network == Network.AIRBENCH:
        # Read only when variables are initialised (a fresh start), on the parameter device.
        with v1.device(devices.consolidation_device(hp.variable_strategy)):
            images = Cifar10DataSet(hp.data_dir, fmt.TRAIN).first_images(airbench.WHITEN_IMAGES)
            whitening = airbench.whitening_kernel(images)  # once, for every tower
    outputs, update_ops, first = [], [], None
    for i, device in enumerate(tower_list):
        with (
            tf.name_scope("tower_%d" % i) as scope,
            v1.variable_scope(tensor_names.NETWORK_SCOPE, reuse=reuse or bool(i)),
            v1.device(devices.device_setter(device, params_device)),
        ):
            model = registry.build(hp, is_training, whitening=whitening, serving=mode == tf.estimator.ModeKeys.PREDICT)
            outputs.append(
                tower_fn(
                    model,
                    image_shards[i],
                    label_shards[i],
                    hp.weight_decay,
                    compute_gradients=is_training,
                    optimizer=optimizer,
                    label_smoothing=hp.label_smoothing if is_training else 0.0,
                    decay_filters=hp.optimizer != Optimizer.MUON,
                )
            )
            if i == 0:
                first = model
                # Moving averages from the first tower only, as the original: they
                # estimate the same statistics, and one update per step is cheaper.
                update_ops = v1.get_collection(v1.GraphKeys.UPDATE_OPS, scope)
    return outputs, update_ops, first


def loss_scale_optimizer(optimizer, precision: str):
    """fp16 gets dynamic loss scaling (Micikevicius et al. 2018): the loss is
    scaled up so small gradients survive in half precision, a step whose
    gradients overflow is skipped (``global_step`` does not move) and halves
    the scale, and 2,000 good steps in a row double it. bf16 has float32's
    exponent range and needs none.

    The loss-scale state lives in local variables: checkpoints hold the same
    float32 variables whatever the precision, so a run can change --precision
    on restart. A restarted fp16 job starts again from 2^15, which a few
    skipped steps bring down to where it was.
    """
    if precision != Precision.FP16:
        return optimizer
    scaled = v1.mixed_precision.MixedPrecisionLossScaleOptimizer(optimizer, "dynamic")
    _make_local(scaled.variables())
    return scaled


def _make_local(variables):
    """Moves variables out of checkpoints: initialised in every session, never saved."""
    global_vars = v1.get_collection_ref(v1.GraphKeys.GLOBAL_VARIABLES)
    for var in variables:
        global_vars.remove(var)
        v1.add_to_collection(v1.GraphKeys.LOCAL_VARIABLES, var)


def _training_spec(hp, features, labels, mode, config, guests):
    """Towers, the schedule, the optimizer step and training summaries."""
    global_step = v1.train.get_or_create_global_step()
    done_at = progress_function(hp)
    images, image_size = features, None
    with v1.device(devices.consolidation_device(hp.variable_strategy)):
        progress = done_at(global_step) if hp.schedule.by_progress else None
        learning_rate = tf.identity(hp.schedule.learning_rate(global_step, progress), name=_op_name(LEARNING_RATE))
        base = v1.train.MomentumOptimizer(learning_rate, momentum=hp.momentum, use_nesterov=hp.nesterov)
        muon_rate = None
        if hp.optimizer == Optimizer.MUON:
            muon_rate = hp.muon_learning_rate * (1.0 - tf.cast(done_at(global_step), tf.float32))
            muon_rate = tf.identity(muon_rate, name=_op_name(MUON_LEARNING_RATE))
            iteration = tf.bfloat16 if hp.precision == Precision.BF16 else tf.float32
            base = muon.MuonOptimizer(learning_rate, hp.momentum, muon_rate, hp.muon_momentum, hp.nesterov, iteration)
        scaled = loss_scale_optimizer(base, hp.precision)
        if hp.image_sizes is not None:
            image_size = tf.identity(hp.image_sizes.size_tensor(done_at(global_step)), name=_op_name(IMAGE_SIZE))
            images = resized_for_training(features, image_size)
    outputs, update_ops, first_model = build_towers(
        hp, images, labels, mode, optimizer=scaled if scaled is not base else None
    )
    with v1.device(devices.consolidation_device(hp.variable_strategy)):
        logits = tf.concat([o.logits for o in outputs], axis=0)
        predictions = predictions_of(logits)
        classes = predictions["classes"]
        loss = tf.reduce_mean([o.loss for o in outputs], name=_op_name(TOTAL_LOSS))
        correct = tf.cast(tf.equal(classes, labels), tf.float32)
        train_accuracy = tf.reduce_mean(correct, name=_op_name(TRAIN_ACCURACY))
        cross_entropy = tf.reduce_mean([o.cross_entropy for o in outputs], name=_op_name(CROSS_ENTROPY))
        gradvars = average_gradients([o.grads_and_vars for o in outputs])
        if hp.precision != Precision.FP16:  # fp16's loss scaling has its own check (skipped steps)
            nonfinite.add_gradient_flags(gradvars)
        for guest in guests:
            guest.add_to_graph(TrainingGraph(hp, gradvars, learning_rate, first_model, features, labels))
        train_op, training_hooks = _optimizer_step(hp, scaled, gradvars, update_ops, global_step, done_at, config)
        if scaled is not base:
            with tf.name_scope(_TRAINING_SUMMARIES):  # train/loss_scale, train/skipped_steps
                train_op = _count_skipped_steps(train_op, gradvars, scaled)
        rates = {"learning_rate": learning_rate, "muon_learning_rate": muon_rate}
        _training_summaries(hp, features, gradvars, rates, train_accuracy, cross_entropy, image_size)
    return tf.estimator.EstimatorSpec(
        mode, loss=loss, predictions=predictions, train_op=train_op, training_hooks=training_hooks
    )


# v1 summary tags are op-name scopes; a scope of their own keeps them from colliding with the named tensors
# ("learning_rate_1"), and the trailing slash re-enters that one scope, never a "train_1".
_TRAINING_SUMMARIES = "train/"


def _training_summaries(hp, features, gradvars, rates, train_accuracy, cross_entropy, image_size):
    """TensorBoard's training scalars, a few of the batch's images, and each layer's histograms."""
    with tf.name_scope(_TRAINING_SUMMARIES):
        for name, rate in rates.items():
            if rate is not None:  # the filters' rate under Muon
                v1.summary.scalar(name, rate)
        v1.summary.scalar("accuracy", train_accuracy)
        v1.summary.scalar("cross_entropy", cross_entropy)
        if image_size is not None:
            v1.summary.scalar("image_size", image_size)
        v1.summary.image("images", tf.cast(features[:3], tf.uint8), max_outputs=3)
    if hp.histograms:
        _histograms(gradvars)


def _optimizer_step(hp, optimizer, gradvars, update_ops, global_step, done_at, config):
    """``(train_op, hooks)``: the averaged gradients applied (through SyncReplicasOptimizer for
    ``--sync``), the towers' batch-norm updates, then Lookahead's pull."""
    training_hooks = []
    if hp.sync:
        optimizer = v1.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=hp.num_workers, total_num_replicas=hp.num_workers
        )
        training_hooks.append(
            hooks_lib.SyncReplicasHook(optimizer, config.is_chief if config else True, num_workers=hp.num_workers)
        )
    minimize = optimizer.apply_gradients(gradvars, global_step=global_step)
    train_op = tf.group(minimize, *update_ops)
    if hp.lookahead:
        train_op = apply_lookahead(train_op, averaged_variables(), global_step, done_at)
    return train_op, training_hooks


def _histograms(gradvars):
    """Weights and gradients of each layer's kernel (where a layer stops learning shows
    first). Non-finite values are zeroed: the histogram op fails on them, and an fp16
    overflow step or a NaN must reach the hooks that explain it, not end in a traceback."""

    def finite(t):
        return tf.where(tf.math.is_finite(t), t, tf.zeros_like(t))

    for grad, var in gradvars:
        if var.op.name.endswith("kernel"):
            name = tensor_names.layer_name(var.op.name)
            v1.summary.histogram("weights/" + name, finite(var))
            v1.summary.histogram("gradients/" + name, finite(grad))


def _count_skipped_steps(train_op, gradvars, optimizer):
    """Counts the fp16 steps the loss-scale optimizer skipped in this process; the count
    and the loss scale go to TensorBoard."""
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in gradvars])
    skipped = v1.get_variable(
        "skipped_steps",
        [],
        tf.int64,
        initializer=v1.zeros_initializer(),
        trainable=False,
        collections=[v1.GraphKeys.LOCAL_VARIABLES],
    )
    count = v1.assign_add(skipped, tf.cast(tf.logical_not(finite), tf.int64))
    scale = [v for v in optimizer.variables() if "current_loss_scale" in v.name][0]
    v1.summary.scalar("loss_scale", scale)
    v1.summary.scalar("skipped_steps", skipped)
    return tf.group(train_op, count)


def progress_function(hp):
    """``done_at(step)``: the fraction of training done at a global-step tensor (float64): of a time
    budget's plan (``schedules.progress_tensor``), else of ``--train-steps``."""
    if hp.schedule.by_progress:
        return schedules.progress_tensor
    total = max(1, hp.schedule.total_steps)
    return lambda step: tf.cast(step, tf.float64) / total


def resized_for_training(images, side, full: int = fmt.HEIGHT):
    """``images`` (``[b, full, full, 3]``, values 0..255) scaled to ``side`` x ``side`` pixels while
    ``side`` (an int32 tensor, ``--progressive-resize``) is below ``full``, else as they are. Bilinear
    with antialiasing (a triangle filter as wide as the scale: every pixel counts, and values stay in
    0..255). The result's height and width are unknown to the graph: the networks take any size."""
    return tf.cond(
        side < full,
        lambda: tf.image.resize(images, tf.stack([side, side]), method="bilinear", antialias=True),
        lambda: images,
    )


def apply_lookahead(train_op, variables, global_step, done_at):
    """Lookahead (Zhang et al. 2019) as airbench94 uses it: after ``train_op``, on every
    ``LOOKAHEAD_EVERY``-th global step, each variable and its slow copy (``<variable>/Lookahead``,
    checkpointed; it starts at the variable's initial value) both become ``slow + (1 - a) (variable - slow)`` with
    ``a = LOOKAHEAD_MAX_PULL * done^3``: ``done_at(step)`` (a tensor) is the fraction of training done
    at the step ``train_op`` has just counted (read after it: a tensor read before could see the step
    before or after the increment, a nondeterministic pull), so early
    syncs leave the weights where they are and late ones average the last steps, while the learning
    rate decays. (airbench also syncs after the very last step; here up to 4 steps after the last sync
    are kept, at a learning rate near 0.)"""
    pairs = []
    for var in variables:
        with v1.colocate_with(var):
            slow = v1.get_variable(var.op.name + "/Lookahead", initializer=var.initial_value, trainable=False)
        pairs.append((var, slow))

    def sync(step):
        pull = LOOKAHEAD_MAX_PULL * tf.cast(tf.clip_by_value(done_at(step), 0.0, 1.0), tf.float32) ** 3
        ops = []
        for var, slow in pairs:
            with v1.colocate_with(var):
                met = slow + (1.0 - tf.cast(pull, var.dtype.base_dtype)) * (var - slow)
                ops += [v1.assign(slow, met), v1.assign(var, met)]
        with tf.control_dependencies(ops):
            return tf.constant(True)

    with tf.control_dependencies([train_op]):
        step = global_step.read_value()  # after train_op's increment
        synced = tf.cond(tf.equal(step % LOOKAHEAD_EVERY, 0), lambda: sync(step), lambda: tf.constant(False))
    return tf.group(train_op, synced)


def averaged_variables():
    """What the weight average covers: the trainable variables and the batch-norm moving statistics
    (the statistics belong to the weights that produced them; airbench averages both)."""
    return v1.trainable_variables() + v1.moving_average_variables()


def _view_logits(hp, view, labels):
    towers, _, _ = build_towers(hp, view, labels, tf.estimator.ModeKeys.EVAL, reuse=True)
    return tf.concat([o.logits for o in towers], axis=0)


def _tta_probabilities(hp, images, labels, logits, flipped_logits):
    """Mean probabilities over flips and 1-pixel translations (airbench's test-time augmentation):
    the image and its mirror (``flipped_logits``, shared with flip TTA), each as it is (weight 1/4) and
    shifted one pixel up-left and down-right with zero padding as in training (1/8 each): six views."""
    padded = tf.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]])
    height, width = fmt.HEIGHT, fmt.WIDTH
    shifted = [padded[:, :height, :width, :], padded[:, 2:, 2:, :]]
    views = []
    for view in shifted:
        views += [(view, 0.125), (tf.reverse(view, axis=[2]), 0.125)]
    total = 0.25 * tf.nn.softmax(logits) + 0.25 * tf.nn.softmax(flipped_logits)
    for view, weight in views:
        total += weight * tf.nn.softmax(_view_logits(hp, view, labels))
    return total


def _least_confident(probabilities, labels, fraction: float):
    """Indices of the ``ceil(fraction x batch)`` images whose plain view's top probability is lowest
    (padding is never among them while real images are left)."""
    confidence = tf.reduce_max(probabilities, axis=1)
    confidence = tf.where(tf.equal(labels, fmt.PAD_LABEL), tf.fill(tf.shape(confidence), 2.0), confidence)
    count = tf.cast(tf.math.ceil(fraction * tf.cast(tf.shape(probabilities)[0], tf.float32)), tf.int32)
    return tf.math.top_k(-confidence, k=count, sorted=False).indices


def _view_metrics(hp, features, labels, logits, plain, weights) -> dict:
    """The accuracies of the test-time views asked for: flip TTA (the mean of the image's and its mirror's
    probabilities) and TTA (``_tta_probabilities``), for the ``--tta-fraction`` least-confident images
    of the batch; the others keep the plain view's probabilities (``plain``). Training flips at random, so the
    mirror is as good a view as the original; reported beside the plain accuracy, never instead of it."""
    chosen = None if hp.tta_fraction == 1 else _least_confident(plain, labels, hp.tta_fraction)
    pick = (lambda t: t) if chosen is None else (lambda t: tf.gather(t, chosen))
    images, view_labels, view_logits = pick(features), pick(labels), pick(logits)
    # The mirror is one view of each: computed once for both (views: evaluation_images).
    flipped_logits = _view_logits(hp, tf.reverse(images, axis=[2]), view_labels)

    def accuracy_of(probabilities):
        if chosen is not None:
            probabilities = tf.tensor_scatter_nd_update(plain, chosen[:, None], probabilities)
        classes = tf.argmax(probabilities, axis=1, output_type=tf.int32)
        return v1.metrics.accuracy(tf.maximum(labels, 0), classes, weights=weights)

    metrics = {}
    if hp.eval_flip_tta:
        metrics["accuracy_flip_tta"] = accuracy_of(0.5 * (pick(plain) + tf.nn.softmax(flipped_logits)))
    if hp.eval_tta:
        probabilities = _tta_probabilities(hp, images, view_labels, view_logits, flipped_logits)
        metrics["accuracy_tta"] = accuracy_of(probabilities)
    return metrics


def model_fn(features, labels, mode, params, config=None):
    """The Estimator model function; ``params`` is an ``HParams``."""
    return _model_fn(features, labels, mode, params, config, guests=())


def model_fn_with(guests):
    """``model_fn`` whose training graph the job's ``guests`` add to (``estimator.training.guest``)."""
    return functools.partial(_model_fn, guests=tuple(guests))


def _model_fn(features, labels, mode, params, config=None, guests=()):
    hp = params
    if mode == tf.estimator.ModeKeys.TRAIN:
        return _training_spec(hp, features, labels, mode, config, guests)
    outputs, _, _ = build_towers(hp, features, labels, mode)
    with v1.device(devices.consolidation_device(hp.variable_strategy)):
        logits = tf.concat([o.logits for o in outputs], axis=0)
        predictions = predictions_of(logits)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions=predictions)

        loss = tf.reduce_mean([o.loss for o in outputs], name=_op_name(TOTAL_LOSS))
        weights = example_weights(labels)
        metrics = {
            "accuracy": v1.metrics.accuracy(tf.maximum(labels, 0), predictions["classes"], weights=weights),
            # Exact over the images; the Estimator's "loss" averages batch losses.
            "cross_entropy": v1.metrics.mean(per_example_cross_entropy(logits, labels), weights=weights),
            "eval_examples": eval_metrics.sum_metric(weights, "eval_examples"),
        }
        metrics.update(eval_metrics.class_metrics(features, labels, predictions, weights))
        if hp.eval_flip_tta or hp.eval_tta:
            metrics.update(_view_metrics(hp, features, labels, logits, predictions["probabilities"], weights))
        return tf.estimator.EstimatorSpec(mode, loss=loss, predictions=predictions, eval_metric_ops=metrics)
