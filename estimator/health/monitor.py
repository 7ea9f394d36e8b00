"""Runs the health rules during training and after each evaluation.

``HealthMonitor`` owns what the rules report: a TensorBoard scalar
``health/<rule>`` per check, a warning line when a rule fires, a record in
``JOB_DIR/health.json`` and, with ``--health-checks stop``, the end of
training (``HealthStop``, exit status 4). A rule fires once when it turns bad
and again only after it has cleared, so a warning is one line, not one per
check.

``HealthHook`` fetches the cross-entropy every step (a scalar the step
computes anyway) and the probes (``estimator.health.probes``) only every
``--health-every-n-steps`` steps; its first step also fetches a few training
images for ``pictures/training_batch``. ``EvalHealth`` runs after each
evaluation: per-class accuracy and over-training. ``HealthChecks`` is the job's
guest that brings them (``estimator.training.guest``).
"""

from __future__ import annotations

import collections
import math

import numpy as np
import tensorflow as tf

from estimator.common import logs, storage, tensor_names
from estimator.common.failures import JobStop
from estimator.common.options import HealthAction
from estimator.data import records as fmt
from estimator.health import probes, rules
from estimator.reporting import pictures, summaries
from estimator.training.guest import Guest

v1 = tf.compat.v1

EXIT_STATUS = 4


class HealthStop(JobStop):
    """A health rule fired under ``--health-checks stop``."""

    exit_status = EXIT_STATUS


class HealthMonitor(object):
    """Shared by the training hook and the evaluation exporter of one process."""

    def __init__(self, hp, is_chief: bool = True, mirror_dir: str = None):
        """``is_chief``: this process writes records and summaries (the chief, or the
        evaluator for the after-evaluation rules); ``mirror_dir``: Vertex AI's
        TensorBoard directory, which gets the same summaries as the job dir."""
        self.hp = hp
        self.action = hp.health_checks
        self.writes = is_chief
        self.mirror = mirror_dir
        self._firing = set()
        self.events = []
        self.losses = []  # training cross-entropy of every step of this process

    def scalars(self, log_dir: str, values: dict, step: int) -> None:
        values = {"health/" + k: v for k, v in values.items() if v is not None and math.isfinite(v)}
        if values and self.writes:
            for directory in summaries.mirrored(log_dir, self.hp.job_dir, self.mirror):
                summaries.write_scalars(directory, values, step)

    def check(self, rule: str, step: int, value, finding) -> None:
        """Reports ``finding`` of ``rule`` if it just turned bad."""
        if finding is None:
            self._firing.discard(rule)
            return
        if rule in self._firing:
            return
        self._firing.add(rule)
        threshold, message = finding
        entry = {
            "rule": rule,
            "step": int(step),
            "value": _jsonable(value),
            "threshold": threshold,
            "action": self.action,
            "message": message,
        }
        self.events.append(entry)
        logs.warning("health: step %d: %s", step, message)
        if self.writes:
            summaries.append_health_event(self.hp.job_dir, entry)
        if self.action == HealthAction.STOP:
            last = tf.train.latest_checkpoint(self.hp.job_dir) or "none"
            raise HealthStop(
                "training stopped at step %d by the health rule %s (--health-checks stop): %s Last checkpoint: %s."
                % (step, rule, message, last)
            )

    def recent_train_loss(self):
        window = rules.LOSS_WINDOW
        if not self.losses:
            return None
        recent = self.losses[-window:]
        return sum(recent) / len(recent)


def _jsonable(value):
    if isinstance(value, tuple):
        return [float(v) for v in value]
    return None if value is None else float(value)


class HealthHook(v1.train.SessionRunHook):
    """The training-time rules."""

    def __init__(self, monitor: HealthMonitor):
        self._monitor = monitor
        self._hp = monitor.hp
        self._norms = collections.deque(maxlen=20)
        self._relu_window = collections.deque(maxlen=rules.DEAD_RELU_WINDOW)

    def begin(self):
        graph = v1.get_default_graph()
        self._probes = probes.get(graph)
        self._step = tensor_names.global_step_read()
        self._xent = graph.get_tensor_by_name(tensor_names.CROSS_ENTROPY)
        self._next_rule_step = None
        self._first_run = True

    def after_create_session(self, session, coord):
        self._step_before = int(session.run(self._step))
        if self._next_rule_step is None:
            self._next_rule_step = self._step_before

    def before_run(self, run_context):
        fetches = {"step": self._step, "xent": self._xent}
        self._rule_step = self._probes is not None and self._step_before >= self._next_rule_step
        if self._rule_step:
            fetches["probes"] = {k: v for k, v in self._probes["tensors"].items() if k not in ("images", "labels")}
        if self._first_run and self._probes is not None:
            fetches["images"] = self._probes["tensors"]["images"]
            fetches["labels"] = self._probes["tensors"]["labels"]
        return v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        r = run_values.results
        step = int(r["step"])  # read before this step's update: the step whose loss and gradients these are
        self._step_before = step + 1
        xent = float(r["xent"])
        if math.isfinite(xent):
            self._monitor.losses.append(xent)
        if "images" in r and self._monitor.writes:
            dirs = summaries.mirrored(self._hp.job_dir, self._hp.job_dir, self._monitor.mirror)
            summaries.write_picture(
                dirs, "pictures/training_batch", lambda: pictures.batch_grid(r["images"], r["labels"]), step
            )
        first, self._first_run = self._first_run, False
        if not self._rule_step:
            return
        self._next_rule_step = step + self._hp.health_every_n_steps
        self._rules(step, xent, r["probes"], fresh_start=first and step == 0)

    def _rules(self, step, xent, p, fresh_start):
        hp, m = self._hp, self._monitor
        values = {}
        if fresh_start:
            value, finding = rules.init_loss(xent, fmt.NUM_CLASSES, rules.INIT_LOSS_TOLERANCE)
            m.check("init_loss", step, value, finding)
            values["init_loss"] = value
        grads_finite = all(np.all(np.isfinite(p[k])) for k in ("grad_mean_abs", "update_ratio", "grad_norm"))
        if grads_finite:  # an fp16 overflow step: nothing to judge (NaN elsewhere stops training)
            names = self._probes["kernel_names"]
            value, finding = rules.vanishing_gradients(names, p["grad_mean_abs"], rules.VANISHING_GRADIENT)
            m.check("vanishing_gradients", step, value, finding)
            values["min_gradient_mean_abs"] = value
            norm = float(p["grad_norm"])
            value, finding = rules.exploding_gradients(norm, list(self._norms), rules.EXPLODING_FACTOR)
            m.check("exploding_gradients", step, value, finding)
            values.update(gradient_norm=norm, gradient_norm_over_median=value)
            self._norms.append(norm)
            value, finding = rules.update_ratio(
                names, p["update_ratio"], rules.UPDATE_RATIO_MIN, rules.UPDATE_RATIO_MAX
            )
            m.check("update_ratio", step, value, finding)
            values.update(
                update_ratio_min=float(np.min(p["update_ratio"])), update_ratio_max=float(np.max(p["update_ratio"]))
            )
        self._relu_window.append([np.asarray(a, bool) for a in p["relu_active"]])
        value, finding = rules.dead_relus(
            self._probes["relu_names"], list(self._relu_window), rules.DEAD_RELU_FRACTION, rules.DEAD_RELU_WINDOW
        )
        m.check("dead_relus", step, value, finding)
        values["dead_relu_fraction"] = value
        (mean, std), finding = rules.input_stats(
            float(p["input_mean"]),
            float(p["input_std"]),
            rules.INPUT_MEAN_MAX,
            rules.INPUT_STD_MIN,
            rules.INPUT_STD_MAX,
        )
        m.check("input_stats", step, (mean, std), finding)
        values.update(input_mean=mean, input_std=std)
        value, finding = rules.loss_not_decreasing(
            m.losses, rules.LOSS_WINDOW, rules.LOSS_MIN_DECREASE, chance=math.log(fmt.NUM_CLASSES)
        )
        m.check("loss_not_decreasing", step, value, finding)
        values["loss_decrease"] = value
        m.scalars(hp.job_dir, values, step)


class EvalHealth(tf.estimator.Exporter):
    """After each evaluation: the per-class accuracy and over-training rules.

    An ``Exporter`` is what ``train_and_evaluate`` calls after each evaluation; it exports nothing.
    """

    def __init__(self, monitor: HealthMonitor, subset: str):
        self._monitor = monitor
        self._subset = subset
        self._history = []

    @property
    def name(self):
        return "health"

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        m, hp = self._monitor, self._monitor.hp
        step = int(eval_result["global_step"])
        values = {}
        per_class = [float(eval_result.get("per_class_accuracy/" + n, math.nan)) for n in fmt.CLASS_NAMES]
        if all(math.isfinite(a) for a in per_class):
            value, finding = rules.class_accuracy(fmt.CLASS_NAMES, per_class, rules.CLASS_RATIO)
            m.check("class_accuracy", step, value, finding)
            values["worst_class_ratio"] = value
        train_loss = m.recent_train_loss()
        if train_loss is not None and (not self._history or step > self._history[-1][0]):
            self._history.append((step, float(eval_result["cross_entropy"]), train_loss))
            value, finding = rules.overtraining(self._history, rules.OVERTRAINING_EVALS)
            m.check("overtraining", step, value, finding)
            values["validation_loss_rise"] = value
        m.scalars(storage.join(hp.job_dir, "eval_" + self._subset), values, step)
        return None


class HealthChecks(Guest):
    """The health rules as the job's guest (``--health-checks warn`` or ``stop``): the probes in the training graph,
    the rules' hook beside training (not on an evaluator) and after each validation."""

    def __init__(self, hp):
        self.evaluator = hp.cluster.task_type == "evaluator"
        self.monitor = HealthMonitor(hp, is_chief=hp.cluster.is_chief or self.evaluator, mirror_dir=hp.tensorboard_dir)

    def add_to_graph(self, graph) -> None:
        hp, model = graph.hp, graph.model
        probes.add(
            graph.gradvars,
            graph.learning_rate,
            hp.weight_decay,
            model.scaled_input,
            model.relu_outputs,
            hp.data_format,
            graph.images,
            graph.labels,
        )

    def train_hooks(self) -> list:
        return [] if self.evaluator else [HealthHook(self.monitor)]

    def after_eval(self) -> list:
        return [EvalHealth(self.monitor, fmt.VALIDATION)]
