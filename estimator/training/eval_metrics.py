"""Evaluation metrics beyond accuracy and loss: per-class accuracy, the confusion matrix and
the most confident mistakes, as Estimator ``eval_metric_ops``.

The pictures and health rules that run after each evaluation
(``estimator.health.monitor.EvalHealth``) read them from the evaluation's result.
"""

from __future__ import annotations

import tensorflow as tf

from estimator.data import records as fmt

v1 = tf.compat.v1


def sum_metric(values, name):
    """A streaming sum, e.g. how many images an evaluation covered."""
    with v1.variable_scope(name):
        total = v1.get_variable(
            "total",
            [],
            tf.float32,
            initializer=v1.zeros_initializer(),
            trainable=False,
            collections=[v1.GraphKeys.LOCAL_VARIABLES, v1.GraphKeys.METRIC_VARIABLES],
        )
    return tf.identity(total), v1.assign_add(total, tf.reduce_sum(values))


MISTAKES_SHOWN = 16


def class_metrics(images, labels, predictions, weights):
    """Per-class accuracy (TensorBoard scalars ``per_class_accuracy/<class>``), the confusion
    matrix and the most confidently misclassified images, for the pictures and health rules
    that run after each evaluation (``estimator.health``)."""
    num_classes = fmt.NUM_CLASSES
    true = tf.maximum(labels, 0)
    classes = predictions["classes"]
    correct = tf.cast(tf.equal(classes, true), tf.float32)
    metrics = {}
    for c, name in enumerate(fmt.CLASS_NAMES):
        in_class = weights * tf.cast(tf.equal(true, c), tf.float32)
        metrics["per_class_accuracy/" + name] = v1.metrics.mean(correct, weights=in_class)

    def local(name, shape, dtype, value):
        return v1.get_variable(
            name,
            shape,
            dtype,
            initializer=v1.constant_initializer(value),
            trainable=False,
            collections=[v1.GraphKeys.LOCAL_VARIABLES, v1.GraphKeys.METRIC_VARIABLES],
        )

    with v1.variable_scope("confusion"):
        matrix = local("matrix", [num_classes, num_classes], tf.float32, 0)
    batch_matrix = tf.math.confusion_matrix(true, classes, num_classes, weights=weights, dtype=tf.float32)
    metrics["confusion_matrix"] = (tf.identity(matrix), v1.assign_add(matrix, batch_matrix))

    # The k most confident mistakes so far: merge this batch's mistakes into them.
    k = MISTAKES_SHOWN
    with v1.variable_scope("mistakes"):
        kept = [
            local("confidence", [k], tf.float32, -1),
            local("images", [k, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH], tf.uint8, 0),
            local("true", [k], tf.int32, -1),
            local("predicted", [k], tf.int32, -1),
        ]
    confidence = tf.reduce_max(predictions["probabilities"], axis=1)
    wrong = tf.logical_and(tf.not_equal(classes, true), weights > 0)
    batch = [
        tf.where(wrong, confidence, -tf.ones_like(confidence)),
        tf.cast(tf.clip_by_value(images, 0, 255), tf.uint8),
        true,
        classes,
    ]
    merged = [tf.concat([a, b], axis=0) for a, b in zip(kept, batch)]
    top = tf.math.top_k(merged[0], k).indices
    update = tf.group(*[v1.assign(var, tf.gather(m, top)) for var, m in zip(kept, merged)])
    for name, var in zip(("confidence", "images", "true", "predicted"), kept):
        metrics["mistakes/" + name] = (tf.identity(var), update)
    return metrics
