"""Karpathy's checks before a run ("A Recipe for Training Neural Networks", 2019), in about a minute.

Each check builds the network the trainer would build (depth, version, data
format, precision, batch norm and learning rate from the trainer's flags) in a
graph of its own and returns a ``Check``:

* label distribution of each split: every class present, none below a third
  of the split's mean count;
* loss at initialisation near ln(10) = 2.303;
* overfit one small batch (augmentation off): the network and the loss can
  fit 16 images to near-zero loss with the trainer's optimizer;
* input-independent baseline: the same training on zeroed inputs must do
  clearly worse on validation images than on the real ones (else the network
  ignores its input, or the data hold nothing to learn);
* backprop dependency: with batch norm in inference mode, the gradient of
  image i's loss reaches only image i (a mixing bug, e.g. a wrong reshape or
  a reduction over the batch axis, would spread it);
* a picture of a training batch exactly as the network receives it (after
  distortion), with class names, saved as PNG.
"""

from __future__ import annotations

import collections
import math

import numpy as np
import tensorflow as tf

from estimator.common import storage, tensor_names
from estimator.data import records as fmt
from estimator.data.pipeline import Cifar10DataSet, pipeline_options
from estimator.health import rules
from estimator.networks import registry
from estimator.reporting import pictures

v1 = tf.compat.v1

Check = collections.namedtuple("Check", "name passed detail")

OVERFIT_IMAGES, OVERFIT_STEPS, OVERFIT_TARGET = 16, 200, 0.05
BASELINE_BATCH, BASELINE_STEPS, BASELINE_EVAL_IMAGES, BASELINE_MARGIN = 64, 100, 512, 0.1


def _model(hp, is_training: bool):
    return registry.build(hp, is_training)


def _xent(logits, labels):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def _batches(data_dir: str, subset: str, batch: int, count: int, distort: bool = False, seed: int = 0):
    """``count`` batches (uint8-valued float32 images, labels) as numpy arrays."""
    data = Cifar10DataSet(data_dir, subset, use_distortion=distort, seed=seed)
    out = [(x.numpy(), y.numpy()) for x, y in data.dataset(batch).take(count)]
    if len(out) < count:
        raise ValueError("%s has fewer than %d images" % (subset, batch * count))
    return out


def label_distribution(data_dir: str, subset: str) -> Check:
    data = Cifar10DataSet(data_dir, subset)
    counts = np.zeros(fmt.NUM_CLASSES, np.int64)
    spec = {fmt.LABEL_KEY: fmt.feature_spec()[fmt.LABEL_KEY]}
    records = tf.data.TFRecordDataset(data.get_filenames()).batch(2048).with_options(pipeline_options())
    for batch in records.map(lambda s: tf.io.parse_example(s, spec)[fmt.LABEL_KEY]):
        counts += np.bincount(batch.numpy(), minlength=fmt.NUM_CLASSES)[: fmt.NUM_CLASSES]
    mean = counts.sum() / fmt.NUM_CLASSES
    worst = int(np.argmin(counts))
    passed = counts.min() > 0 and counts.min() >= mean / 3
    detail = "%s images; per class %s" % (format(int(counts.sum()), ","), " ".join(str(int(c)) for c in counts))
    if not passed:
        detail += ": '%s' has %d, under a third of the mean %.0f" % (fmt.CLASS_NAMES[worst], counts[worst], mean)
    return Check("label distribution (%s)" % subset, bool(passed), detail)


def loss_at_init(hp, data_dir: str, seed: int = 0) -> Check:
    images, labels = _batches(data_dir, fmt.VALIDATION, 128, 1)[0]
    with tf.Graph().as_default():
        v1.set_random_seed(seed)
        with v1.variable_scope(tensor_names.NETWORK_SCOPE):
            logits = _model(hp, True).forward_pass(tf.constant(images))
        loss = tf.reduce_mean(_xent(logits, tf.constant(labels)))
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            value = float(sess.run(loss))
    # The same rule the trainer checks at its first step.
    tolerance = rules.INIT_LOSS_TOLERANCE
    _, finding = rules.init_loss(value, fmt.NUM_CLASSES, tolerance)
    return Check(
        "loss at initialisation",
        finding is None,
        "%.4f (ln %d = %.4f, tolerance %.2f)" % (value, fmt.NUM_CLASSES, math.log(fmt.NUM_CLASSES), tolerance),
    )


def _train(hp, batches, eval_images=None, eval_labels=None, steps=100, zero_inputs=False, seed=0, stop_below=None):
    """Trains a fresh network on ``batches`` (cycled) for up to ``steps`` steps with the
    trainer's momentum SGD at its peak rate; returns (steps run, last training loss,
    validation loss or None). Batch norm uses batch statistics throughout: a hundred
    steps are too few for the moving averages."""
    height, width = fmt.HEIGHT, fmt.WIDTH
    with tf.Graph().as_default():
        v1.set_random_seed(seed)
        x = v1.placeholder(tf.float32, [None, height, width, fmt.DEPTH])
        y = v1.placeholder(tf.int32, [None])
        inputs = tf.zeros_like(x) if zero_inputs else x
        with v1.variable_scope(tensor_names.NETWORK_SCOPE):
            logits = _model(hp, True).forward_pass(inputs)
        loss = tf.reduce_mean(_xent(logits, y))
        step = v1.train.MomentumOptimizer(hp.learning_rate, hp.momentum, use_nesterov=hp.nesterov).minimize(loss)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            value = math.nan
            for i in range(steps):
                images, labels = batches[i % len(batches)]
                _, value = sess.run([step, loss], {x: images, y: labels})
                if not math.isfinite(value) or (stop_below is not None and value < stop_below):
                    break
            val = None
            if eval_images is not None:
                val = float(
                    np.mean(
                        [
                            sess.run(loss, {x: eval_images[j : j + 128], y: eval_labels[j : j + 128]})
                            for j in range(0, len(eval_labels), 128)
                        ]
                    )
                )
    return i + 1, float(value), val


def overfit_one_batch(hp, data_dir: str) -> Check:
    batch = _batches(data_dir, fmt.TRAIN, OVERFIT_IMAGES, 1)
    steps, loss, _ = _train(hp, batch, steps=OVERFIT_STEPS, stop_below=OVERFIT_TARGET)
    passed = loss < OVERFIT_TARGET
    detail = "loss %.4f after %d steps on %d images (target < %g)" % (loss, steps, OVERFIT_IMAGES, OVERFIT_TARGET)
    if not passed:
        detail += ": the network cannot fit even this; check --learning-rate (%g) and the model" % hp.learning_rate
    return Check("overfit one batch", passed, detail)


def zero_input_baseline(hp, data_dir: str) -> Check:
    batches = _batches(data_dir, fmt.TRAIN, BASELINE_BATCH, 10)
    evaluation = _batches(data_dir, fmt.VALIDATION, BASELINE_EVAL_IMAGES, 1)[0]
    _, _, real = _train(hp, batches, *evaluation, steps=BASELINE_STEPS)
    _, _, zero = _train(hp, batches, *evaluation, steps=BASELINE_STEPS, zero_inputs=True)
    passed = real < zero - BASELINE_MARGIN
    detail = (
        "validation loss %.4f with real inputs, %.4f with zeroed inputs after %d steps (real must be lower "
        "by %.1f)" % (real, zero, BASELINE_STEPS, BASELINE_MARGIN)
    )
    if not passed:
        detail += ": the network learns nothing from the pixels; are the images blank or unrelated to the labels?"
    return Check("input-independent baseline", passed, detail)


def backprop_dependency(hp, index: int = 2, batch: int = 4, seed: int = 0) -> Check:
    rng = np.random.RandomState(seed)
    images = rng.uniform(0, 255, [batch, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH]).astype(np.float32)
    labels = rng.randint(0, fmt.NUM_CLASSES, batch).astype(np.int32)
    with tf.Graph().as_default():
        v1.set_random_seed(seed)
        x = tf.constant(images)
        with v1.variable_scope(tensor_names.NETWORK_SCOPE):
            logits = _model(hp, False).forward_pass(x)  # batch norm in inference mode
        grad = tf.gradients(_xent(logits, tf.constant(labels))[index], x)[0]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            g = np.abs(sess.run(grad)).reshape(batch, -1).sum(axis=1)
    others = [j for j in range(batch) if j != index and g[j] != 0]
    passed = g[index] > 0 and not others
    detail = "gradient of image %d's loss: %s per image" % (index, ", ".join("%.3g" % v for v in g))
    if others:
        detail += ": it reaches images %s, so examples mix inside the network" % others
    elif g[index] == 0:
        detail += ": it does not even reach image %d" % index
    return Check("backprop dependency", bool(passed), detail)


def training_batch_picture(hp, data_dir: str, path: str, seed: int = 0) -> Check:
    images, labels = _batches(data_dir, fmt.TRAIN, 16, 1, distort=hp.use_distortion_for_training, seed=seed)[0]
    storage.write_bytes(path, pictures.batch_grid(np.clip(images, 0, 255).astype(np.uint8), labels))
    names = [fmt.CLASS_NAMES[int(c)] for c in labels]
    return Check("training batch picture", True, "%s (%s%s)" % (path, ", ".join(names[:6]), ", ..."))


def run_checks(hp, output_dir: str, log=print):
    """Runs every check; ``log`` gets each result as it comes. Returns the list of ``Check``."""
    checks = []

    def add(check):
        checks.append(check)
        log("%-32s %-6s  %s" % (check.name, "PASS" if check.passed else "FAIL", check.detail))

    for subset in fmt.SUBSETS:
        add(label_distribution(hp.data_dir, subset))
    add(loss_at_init(hp, hp.data_dir))
    add(backprop_dependency(hp))
    add(overfit_one_batch(hp, hp.data_dir))
    add(zero_input_baseline(hp, hp.data_dir))
    add(training_batch_picture(hp, hp.data_dir, storage.join(output_dir, "training_batch.png")))
    return checks
