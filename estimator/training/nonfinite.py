"""Stops training at the first non-finite loss or gradient, and says what to do.

The Estimator's own ``NanTensorHook`` sees only a NaN loss (not Inf) and ends
with a 40-line traceback saying "NaN loss during training". Here ``model_fn``
adds one boolean per gradient (``is_finite`` reduced over it: cheap beside the
convolutions) and the hook fetches them with the loss every step. On the first
non-finite value it records the event in ``JOB_DIR/health.json`` and raises
``NonFiniteError``, whose message names the step, the first non-finite group
(the loss, or the first layer whose gradient is not finite), the learning rate
and the last good checkpoint; ``cifar10_main`` prints it and exits with 3.

fp16 runs skip this gradient check: overflowing fp16 gradients are expected
there and are handled by loss scaling (skipped steps are counted instead).
"""

from __future__ import annotations

import math

import tensorflow as tf

from estimator.common import tensor_names
from estimator.common.failures import JobStop
from estimator.reporting.summaries import append_health_event

v1 = tf.compat.v1

GRADS_FINITE = "health_grads_finite"  # graph collection: [bool per gradient], [variable names]
EXIT_STATUS = 3


class NonFiniteError(JobStop):
    """Training produced a NaN or infinite loss or gradient."""

    exit_status = EXIT_STATUS


def add_gradient_flags(grads_and_vars) -> None:
    """In ``model_fn``: one finiteness flag per gradient, for ``NonFiniteHook``."""
    flags = tf.stack([tf.reduce_all(tf.math.is_finite(g)) for g, _ in grads_and_vars], name="grads_finite")
    names = tf.constant([v.op.name for _, v in grads_and_vars], name="grad_names")
    v1.add_to_collection(GRADS_FINITE, flags)
    v1.add_to_collection(GRADS_FINITE, names)


class NonFiniteHook(v1.train.SessionRunHook):
    """Checks the loss and the gradient flags after every step."""

    def __init__(self, job_dir: str):
        self._job_dir = job_dir

    def begin(self):

        graph = v1.get_default_graph()
        self._loss = graph.get_tensor_by_name(tensor_names.TOTAL_LOSS)
        self._rate = graph.get_tensor_by_name(tensor_names.LEARNING_RATE)
        self._step = tensor_names.global_step_read()
        found = v1.get_collection(GRADS_FINITE)
        self._flags, self._names = found if found else (None, None)

    def before_run(self, run_context):
        fetches = {"loss": self._loss, "rate": self._rate, "step": self._step}
        if self._flags is not None:
            fetches["flags"] = self._flags
        return v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        r = run_values.results
        loss = float(r["loss"])
        bad_grads = "flags" in r and not r["flags"].all()
        if math.isfinite(loss) and not bad_grads:
            return
        step = int(r["step"])  # read before this step's update: the step whose loss and gradients these are
        if not math.isfinite(loss):
            where = "the loss (%s)" % loss
        else:
            names = run_context.session.run(self._names)
            first = names[list(r["flags"]).index(False)].decode()
            where = "the gradient of %s (the loss was still finite: %.4g)" % (first, loss)
        checkpoint = tf.train.latest_checkpoint(self._job_dir)
        message = (
            "training stopped at step %d: %s is not finite, at learning rate %.4g. Last good checkpoint: %s. "
            "Lower --learning-rate, or add --warmup-epochs; a restart with the same --job-dir resumes from that "
            "checkpoint." % (step, where, float(r["rate"]), checkpoint or "none (no checkpoint was written yet)")
        )
        append_health_event(
            self._job_dir,
            {
                "rule": "non_finite",
                "step": step,
                "value": loss if math.isfinite(loss) else str(loss),
                "threshold": "finite",
                "action": "stop",
                "message": message,
            },
        )
        raise NonFiniteError(message)
