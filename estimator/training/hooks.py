"""Training and evaluation hooks: progress lines, examples/sec, one line per evaluation, tuning reports."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import tensorflow as tf

from estimator.common import durations, logs, storage, tensor_names
from estimator.reporting import pictures, summaries

v1 = tf.compat.v1

VALIDATION_RECORD = "last_validation.json"  # in the evaluation's directory, by the evaluator task
METRIC_TAG = "accuracy"  # what the tuning service is told after each validation (hptuning_config.yaml's)


class ProgressHook(v1.train.SessionRunHook):
    """One line every N steps: where training is, how fast, how well, and when it ends.

    ``step 400/7800 (5%) | 512 img/s | loss 1.612 (xent 1.204, acc 0.55) | lr 0.1 | 0:01:42, ETA 0:31:10``

    Speed and ETA come from the last interval of this process (images of this
    worker; the global step may move faster in a cluster). Under ``--time-budget``
    the total is the planner's current plan and the line ends with the budget left.
    """

    def __init__(self, total_steps, examples_per_step: int, every_n_steps: int = 100, budget_left=None):
        """``total_steps``: a number, or a function returning the current plan; ``budget_left``:
        a function returning the seconds of budget left, or None."""
        self._total_of = total_steps if callable(total_steps) else (lambda: total_steps)
        self._budget_left = budget_left
        self._examples = examples_per_step
        self._every = every_n_steps
        self._start = time.perf_counter()

    def begin(self):

        graph = v1.get_default_graph()
        self._fetches = {"step": tensor_names.global_step_read()}
        for key, name in (
            ("loss", tensor_names.TOTAL_LOSS),
            ("xent", tensor_names.CROSS_ENTROPY),
            ("acc", tensor_names.TRAIN_ACCURACY),
            ("lr", tensor_names.LEARNING_RATE),
        ):
            self._fetches[key] = graph.get_tensor_by_name(name)
        self._last = None  # (time, step) of the previous line

    def before_run(self, run_context):
        return v1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        r = run_values.results
        # The global step is read before this step's update (as the Estimator's own
        # "loss = ..., step = 0"): the steps done are one more.
        step, now = int(r["step"]) + 1, time.perf_counter()
        if self._last is None:
            self._last = (now, step)
            self._line(r, step, now, None)
            return
        if step - self._last[1] < self._every and step < self._total_of():
            return
        then, before = self._last
        rate = (step - before) / (now - then) if now > then else None
        self._last = (now, step)
        self._line(r, step, now, rate)

    def _line(self, r, step, now, steps_per_sec):
        speed = eta = "-"
        total = self._total_of()
        if steps_per_sec:
            speed = "%.0f img/s" % (steps_per_sec * self._examples)
            eta = durations.format_clock(max(0, total - step) / steps_per_sec)
        budget = " | budget left %s" % durations.format_clock(self._budget_left()) if self._budget_left else ""
        logs.info(
            "step %d/%d (%d%%) | %s | loss %.4f (xent %.4f, acc %.2f) | lr %.4g | %s, ETA %s%s",
            step,
            total,
            100 * step // max(1, total),
            speed,
            float(r["loss"]),
            float(r["xent"]),
            float(r["acc"]),
            float(r["lr"]),
            durations.format_clock(now - self._start),
            eta,
            budget,
        )


class ExamplesPerSecondHook(v1.train.SessionRunHook):
    """Keeps the steady-state examples/sec (``results.json``; the progress line logs the current rate).

    The first ``warmup_steps`` are left out of the steady-state rate: they pay
    for graph optimisation, filling the shuffle buffer and XLA compilation.
    """

    def __init__(self, examples_per_step: int, warmup_steps: int = 10):
        self._examples_per_step = examples_per_step
        self._warmup_steps = warmup_steps
        self._steps = 0
        self._start = None
        self._last = None

    def after_run(self, run_context, run_values):
        now = time.perf_counter()
        self._steps += 1
        if self._steps == self._warmup_steps:
            self._start = now
        elif self._start is not None:
            self._last = now

    @property
    def steady_state_examples_per_sec(self):
        """Mean rate after warm-up, or None if training was too short to tell."""
        if self._start is None or self._last is None or self._last <= self._start:
            return None
        return (self._steps - self._warmup_steps) * self._examples_per_step / (self._last - self._start)


class SessionReadyHook(v1.train.SessionRunHook):
    """When the session was ready: its graph built, the checkpoint restored and the variables initialised
    (``after_create_session``), so that an evaluation's set-up is timed apart from its images."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self.ready = None

    def after_create_session(self, session, coord):
        self.ready = self._clock()


class _HyperTune(object):
    """One ``hypertune.HyperTune`` per process: a new one wipes the metrics file."""

    _instance = None

    @classmethod
    def report(cls, tag: str, value: float, global_step: int, checkpoint_path: str = "", trial=None) -> None:
        if cls._instance is None:
            import hypertune  # on the first report: only a tuned job reports

            cls._instance = hypertune.HyperTune()
        if trial:
            # HyperTune reads the trial from CLOUD_ML_TRIAL_ID only; TF_CONFIG's task.trial counts too.
            cls._instance.trial_id = trial
        cls._instance.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=tag,
            metric_value=value,
            global_step=global_step,
            checkpoint_path=checkpoint_path or "",
        )


class EvalReporter(tf.estimator.Exporter):
    """Runs after every evaluation of ``train_and_evaluate``: logs one line and
    reports the tuning metric to the hyperparameter tuning service.

    An ``Exporter`` is the hook ``train_and_evaluate`` offers for "after each
    evaluation", locally, on the master and on an evaluator alike; it exports
    nothing.
    """

    def __init__(self, subset: str, mirror_dir: str = None, trial: str = None):
        self._subset, self._mirror_dir, self._trial = subset, mirror_dir, trial
        self.results = []

    @property
    def name(self):
        return "eval_report"

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        # Scalars only: the confusion matrix and the mistakes are for the pictures.
        result = {k: v.item() if hasattr(v, "item") else v for k, v in eval_result.items() if np.ndim(v) == 0}
        self.results.append(result)
        logs.info(
            "Evaluation [%s] at step %d: accuracy %.4f, cross_entropy %.4f, loss %.4f on %d images",
            self._subset,
            result["global_step"],
            result["accuracy"],
            result["cross_entropy"],
            result["loss"],
            int(result["eval_examples"]),
        )
        if self._mirror_dir:
            summaries.write_scalars(self._mirror_dir, result, int(result["global_step"]))
        step = int(result["global_step"])
        _HyperTune.report(METRIC_TAG, float(result[METRIC_TAG]), step, checkpoint_path, trial=self._trial)
        return None


class EvaluatorRelay(v1.train.CheckpointSaverListener):
    """On a Vertex AI chief, which only trains (TensorFlow's ``run_chief``): after each checkpoint, the
    validations the evaluator task wrote since (``JOB_DIR/eval_validation``, a directory both see) are logged
    and reported to the tuning service from the chief, as the legacy master reported its own."""

    def __init__(self, eval_dir: str, trial: str = None):
        self._eval_dir, self._trial = eval_dir, trial
        self.relayed = []  # [(global step, value)] in the order reported

    def after_save(self, session, global_step_value):
        self.relay()

    def final_validation(self, record: str, step: int, timeout: float, poll_secs: float = 2.0):
        """The evaluator's validation of checkpoint ``step`` from its ``ValidationRecord`` (written after every
        exporter, the best export included), relayed: the chief waits for it, so that the job, which Vertex AI
        ends with its primary replica, keeps the evaluator's last validation and export. None after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            if storage.exists(record):
                found = json.loads(storage.read_text(record))
                if found["global_step"] >= step:
                    self.relay()
                    return found
            if time.monotonic() > deadline:
                return None
            time.sleep(poll_secs)

    def relay(self) -> None:
        done = {step for step, _ in self.relayed}
        [series] = summaries.read_scalars(self._eval_dir, [METRIC_TAG]).values()
        for step, value in series:
            if step in done or (self.relayed and step < self.relayed[-1][0]):
                continue
            logs.info("Evaluation [validation, by the evaluator] at step %d: %s %.4f", step, METRIC_TAG, value)
            _HyperTune.report(METRIC_TAG, float(value), int(step), trial=self._trial)
            self.relayed.append((step, value))


class SyncReplicasHook(v1.train.SessionRunHook):
    """``SyncReplicasOptimizer.make_session_run_hook()``, without its two hangs at the end.

    Workers: a worker that has pushed its gradients waits for a token from the
    chief; once the chief stops, none comes and the worker waits forever
    (tensorflow/models#2404; seen here in one loopback run in two). So when the
    chief finishes it releases one more round of tokens: each worker completes
    its step, sees the final global step and stops.

    Chief:
    The stock hook registers the chief's queue runner with the coordinator. At
    the end of training that runner is blocked taking gradients that will never
    come, so closing the session waits the coordinator's 120 s grace period
    before cancelling it (measured: 2 min 28 s for a 60-step loopback job that
    otherwise takes 11 s); the Estimator offers no way to shorten that grace.
    Here the runner is a daemon thread that reports errors to the coordinator
    but does not hold up its join; closing the session cancels its blocked step.

    Start: the stock hook gives the chief a token per worker before the first update, so a chief that
    starts first (the Estimator holds workers back 5 s) trains alone, each update two of its own batches,
    and may finish before a worker joins. Here it gets none (no init-tokens op): the first update waits
    for every worker.
    """

    def __init__(self, optimizer, is_chief: bool, num_workers: int):
        self._optimizer = optimizer
        self._is_chief = is_chief
        self._num_workers = num_workers

    def begin(self):
        opt = self._optimizer
        self._ready_op = opt.ready_for_local_init_op
        if self._is_chief:
            self._local_init_op = opt.chief_init_op
            self._sync_op = opt.get_chief_queue_runner().enqueue_ops[0]
            # A token for every worker that may be waiting when training ends.
            self._release_op = opt.get_init_tokens_op(self._num_workers)
        else:
            self._local_init_op = opt.local_step_init_op
            self._sync_op = self._release_op = None

    def end(self, session):
        if self._release_op is not None:
            session.run(self._release_op)

    def after_create_session(self, session, coord):
        not_ready = session.run(self._ready_op)
        if not_ready.size:
            raise RuntimeError("SyncReplicasOptimizer: model not ready for local init: %s" % not_ready)
        session.run(self._local_init_op)
        if self._sync_op is not None:

            def aggregate():
                try:
                    while not coord.should_stop():
                        session.run(self._sync_op)
                except (tf.errors.CancelledError, tf.errors.OutOfRangeError):
                    pass  # the session was closed: training is over
                except Exception as e:  # noqa: BLE001 - handed to the coordinator, which re-raises it
                    coord.request_stop(e)

            threading.Thread(target=aggregate, name="sync_replicas_aggregator", daemon=True).start()


class SummaryMirrorHook(v1.train.SessionRunHook):
    """Writes the training summaries to a second directory as well, every ``every_n_steps`` as the Estimator writes
    its own: Vertex AI's TensorBoard reads ``AIP_TENSORBOARD_LOG_DIR``, the Estimator writes beside the checkpoints.
    """

    def __init__(self, log_dir: str, every_n_steps: int):
        self._log_dir = log_dir
        self._every_n_steps = every_n_steps

    def begin(self):
        self._summary = v1.summary.merge_all()
        self._step = tensor_names.global_step_read()
        self._writer = v1.summary.FileWriterCache.get(self._log_dir)
        self._last, self._next = -1, 0

    def before_run(self, run_context):
        # The summaries only on the steps that write them: run every step, each layer's histograms cost a
        # ResNet-20 7% of its speed (docs/speed.md).
        fetches = {"step": self._step}
        if self._summary is not None and self._last + 1 >= self._next:
            fetches["summary"] = self._summary
        return v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        self._last = run_values.results["step"] + 1  # the step this run trained to (read before its update)
        if "summary" in run_values.results:
            # Labelled as the Estimator's own SummarySaverHook labels them: the step after the update, read anew.
            self._last = run_context.session.run(self._step)
            self._writer.add_summary(run_values.results["summary"], self._last)
            self._next = self._last + self._every_n_steps

    def end(self, session):
        self._writer.flush()


class EvalPictures(tf.estimator.Exporter):
    """After each evaluation, TensorBoard's pictures of it: the confusion matrix and the most confident mistakes
    (an ``Exporter``, as ``train_and_evaluate`` calls them; it exports nothing)."""

    def __init__(self, hp, subset: str):
        self._hp, self._subset = hp, subset

    @property
    def name(self):
        return "pictures"

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        r, step = eval_result, int(eval_result["global_step"])
        log_dir = storage.join(self._hp.job_dir, "eval_" + self._subset)
        dirs = summaries.mirrored(log_dir, self._hp.job_dir, self._hp.tensorboard_dir)
        if "confusion_matrix" in r:
            title = "%s, step %d" % (self._subset, step)
            draw = lambda: pictures.confusion_png(r["confusion_matrix"], title)  # noqa: E731
            summaries.write_picture(dirs, "pictures/confusion_matrix", draw, step)
        if "mistakes/images" in r:
            args = [r["mistakes/" + k] for k in ("images", "true", "predicted", "confidence")]
            draw = lambda: pictures.mistakes_png(*args)  # noqa: E731
            summaries.write_picture(dirs, "pictures/most_confident_mistakes", draw, step)
        return None


class ValidationRecord(tf.estimator.Exporter):
    """Last after each evaluation on an evaluator: its scalars in ``path`` (``VALIDATION_RECORD`` in the evaluation's
    directory), which the chief waits for at the end (``EvaluatorRelay.final_validation``)."""

    def __init__(self, path: str):
        self._path = path

    @property
    def name(self):
        return "validation_record"

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        record = {k: float(eval_result[k]) for k in ("accuracy", "cross_entropy", "loss")}
        record.update(global_step=int(eval_result["global_step"]), eval_examples=int(eval_result["eval_examples"]))
        storage.write_text(self._path, json.dumps(record) + "\n")
        return None
