"""Runs one training job: ``tf.estimator`` training and evaluation plus the job's own records.

``run`` reads as its steps: record the hyperparameters (``JOB_DIR/hparams.json``),
build the hooks, train by the evaluation policy (periodic evaluations of the
validation split, what a tuning study may look at, or one at the end), then on
the chief: export, evaluate the held-out test split once and write
``JOB_DIR/results.json`` and ``curves.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import tensorflow as tf

from estimator.common import cluster as cluster_lib
from estimator.common import durations, logs, processes, storage
from estimator.common.options import EvalPolicy, HealthAction
from estimator.data import records as fmt
from estimator.data.pipeline import Cifar10DataSet
from estimator.health import nonfinite
from estimator.health.monitor import EvalHealth, HealthHook, HealthMonitor
from estimator.networks import registry
from estimator.reporting import summaries
from estimator.serving import exporters
from estimator.training import config, hooks
from estimator.training import hparams as hparams_lib
from estimator.training.model_fn import model_fn

v1 = tf.compat.v1

RESULTS_FILE = "results.json"


def input_fn(hp: hparams_lib.HParams, subset: str, seed=None):
    """An Estimator ``input_fn`` over one subset, built on the CPU."""
    training = subset == fmt.TRAIN
    batch_size = hp.train_batch_size if training else hp.eval_batch_size

    def fn():
        with tf.device("/cpu:0"):
            distort = training and hp.use_distortion_for_training
            also = [s for s in hp.train_subsets if s != fmt.TRAIN] if training else ()
            data = Cifar10DataSet(
                hp.data_dir,
                subset,
                use_distortion=distort,
                seed=seed,
                also=also,
                cutout=hp.cutout,
                crop_padding=hp.crop_padding,
            )
            return data.make_batch(batch_size)

    return fn


def session_config(hp: hparams_lib.HParams):
    cluster = hp.cluster
    config_ = v1.ConfigProto(
        allow_soft_placement=True,
        log_device_placement=hp.log_device_placement,
        intra_op_parallelism_threads=hp.num_intra_threads,
        inter_op_parallelism_threads=hp.num_inter_threads,
        gpu_options=v1.GPUOptions(force_gpu_compatible=True),
    )
    if hp.num_gpus == 0 and hp.num_cpu_towers > 1:
        config_.device_count["CPU"] = hp.num_cpu_towers
    if cluster.distributed and cluster.task_type in cluster_lib.TRAINING_ROLES:
        # A session_config of our own replaces the Estimator's, which would have
        # set these: without them the chief waits for every other worker
        # ("CreateSession still waiting") and can hang.
        config_.device_filters.extend(["/job:ps", "/job:%s/task:%d" % (cluster.task_type, cluster.task_index)])
    return config_


def run_config(hp: hparams_lib.HParams) -> tf.estimator.RunConfig:
    steps = hp.save_checkpoints_steps
    with cluster_lib.hidden_from_estimator(hp.cluster):
        return tf.estimator.RunConfig(
            model_dir=hp.job_dir,
            session_config=session_config(hp),
            tf_random_seed=hp.seed,
            save_checkpoints_steps=steps,
            save_checkpoints_secs=None if steps else hp.save_checkpoints_secs,
            keep_checkpoint_max=hp.keep_checkpoint_max,
            log_step_count_steps=hp.log_every_n_steps,
            save_summary_steps=hp.save_summary_steps or min(100, hp.log_every_n_steps),
        )


def _training_rank(cluster: cluster_lib.Cluster) -> int:
    """0 for the chief, 1.. for workers: gives each worker its own data order."""
    if cluster.task_type == "worker":
        return cluster.task_index + (1 if any(cluster.spec.get(r) for r in ("master", "chief")) else 0)
    return 0


def _is_evaluator(hp: hparams_lib.HParams) -> bool:
    return hp.cluster.task_type == "evaluator"


def writes_job_records(hp: hparams_lib.HParams) -> bool:
    """The chief (not an evaluator) writes hparams.json, results.json, the final export."""
    return hp.cluster.is_chief and not _is_evaluator(hp)


@dataclass
class Hooks:
    """What runs beside training and after each evaluation of one process."""

    train: list
    after_eval: list
    speed: hooks.ExamplesPerSecondHook
    reporter: hooks.EvalReporter
    budget: object = None  # an estimator.budget.job.BudgetedJob, or None
    evaluation: list = None  # hooks of the evaluations during training
    stop: object = None  # a resilience.SignalStop, or None
    saving_listeners: list = None  # told of each checkpoint training saves


def build_hooks(hp: hparams_lib.HParams, stop=None, budget=None) -> Hooks:
    cluster = hp.cluster
    speed = hooks.ExamplesPerSecondHook(hp.train_batch_size)
    if budget:
        progress = budget.progress_hook()
    else:
        progress = hooks.ProgressHook(hp.train_steps, hp.train_batch_size, every_n_steps=hp.log_every_n_steps)
    # First in the list: it must see a NaN before the Estimator's own NanTensorHook does.
    train_hooks = [nonfinite.NonFiniteHook(hp.job_dir), speed, progress]
    if budget:
        train_hooks.extend(budget.train_hooks())
    if stop is not None:
        train_hooks.append(stop.hook())
    # Vertex AI's TensorBoard reads its own directory (config: AIP_TENSORBOARD_LOG_DIR);
    # the Estimator writes beside the checkpoints.
    mirror = hp.tensorboard_dir
    monitor = HealthMonitor(hp, is_chief=cluster.is_chief or _is_evaluator(hp), mirror_dir=mirror)
    if hp.health_checks != HealthAction.OFF and not _is_evaluator(hp):
        train_hooks.append(HealthHook(monitor))
    eval_mirror = None
    if mirror:
        if cluster.is_chief:
            train_hooks.append(hooks.SummaryMirrorHook(mirror, min(100, hp.log_every_n_steps)))
        eval_mirror = storage.join(mirror, "eval_" + fmt.VALIDATION)
    reporter = hooks.EvalReporter(fmt.VALIDATION, mirror_dir=eval_mirror, trial=cluster.trial)
    after_eval = [reporter, EvalHealth(monitor, fmt.VALIDATION)]
    if hp.export and hp.validates:
        after_eval.append(exporters.BestAccuracyExporter(hp))
    eval_hooks = [stop.eval_hook()] if stop is not None else []
    listeners = budget.saving_listeners() if budget else []
    if cluster.distributed and cluster.task_type == "chief" and hp.validates:
        listeners.append(hooks.EvaluatorRelay(storage.join(hp.job_dir, "eval_" + fmt.VALIDATION), trial=cluster.trial))
    return Hooks(train_hooks, after_eval, speed, reporter, budget, eval_hooks, stop, listeners)


def train_by_policy(hp: hparams_lib.HParams, estimator_: tf.estimator.Estimator, job_hooks: Hooks) -> float:
    """Trains to ``hp.train_steps`` with the validation evaluations ``--eval-policy`` asks for;
    returns the seconds it took."""
    train_seed = None if hp.seed is None else hp.seed + _training_rank(hp.cluster)
    train_input = input_fn(hp, fmt.TRAIN, seed=train_seed)
    start = time.perf_counter()
    # Under --time-budget the planner's hook ends training (train_steps is None).
    budget = job_hooks.budget
    train_hooks = job_hooks.train
    if budget and estimator_.latest_checkpoint() and budget.nothing_to_train():
        train_hooks = None
    if budget:
        budget.training_begins()
    if hp.eval_policy == EvalPolicy.FINAL and not hp.cluster.distributed:
        # Short runs: no evaluation until training is done, then one on the validation split.
        if train_hooks is not None:
            estimator_.train(
                train_input, max_steps=hp.train_steps, hooks=train_hooks, saving_listeners=job_hooks.saving_listeners
            )
        if job_hooks.stop is not None:
            job_hooks.stop.check()  # a signal during training: the checkpoint is saved, end now
        seconds = time.perf_counter() - start
        if not hp.validates:
            return seconds  # the validation split was training data
        validation = estimator_.evaluate(input_fn(hp, fmt.VALIDATION), name=fmt.VALIDATION)
        for exporter in job_hooks.after_eval:
            exporter.export(estimator_, None, estimator_.latest_checkpoint(), validation, True)
        return seconds
    train_spec = tf.estimator.TrainSpec(
        train_input, max_steps=hp.train_steps, hooks=job_hooks.train, saving_listeners=job_hooks.saving_listeners
    )
    eval_spec = tf.estimator.EvalSpec(
        input_fn(hp, fmt.VALIDATION),
        steps=None,
        name=fmt.VALIDATION,
        exporters=job_hooks.after_eval,
        hooks=job_hooks.evaluation,
        start_delay_secs=0,
        throttle_secs=hp.eval_throttle_secs,
    )
    tf.estimator.train_and_evaluate(estimator_, train_spec, eval_spec)
    return time.perf_counter() - start


def final_results(hp, estimator_, job_hooks: Hooks, train_seconds: float) -> dict:
    """On the chief after training: the final export, the test evaluation and results.json."""
    final_export = None
    if hp.export:
        final_export = exporters.export_final(hp, estimator_.latest_checkpoint())
        if hp.model_export_dir:
            exporters.copy_export(final_export, hp.model_export_dir)
    budget = job_hooks.budget
    kept, dropped = budget.test_views() if budget else ((), [])
    test_hp = hp.with_test_views(kept) if budget else hp
    test_estimator = estimator_
    if (test_hp.eval_flip_tta, test_hp.eval_tta) != (hp.validation_flip_tta, False):
        # The test evaluation's model_fn with the test split's TTA setting (hparams.json: derived).
        test_estimator = tf.estimator.Estimator(model_fn=model_fn, config=estimator_.config, params=test_hp)
    evaluation_started, ready = time.monotonic(), hooks.SessionReadyHook()
    test = test_estimator.evaluate(input_fn(test_hp, fmt.TEST), name="test", hooks=[ready])
    test_eval_secs = (ready.ready - evaluation_started, time.monotonic() - evaluation_started)
    validation = _final_validation(hp, estimator_, job_hooks)
    rate = job_hooks.speed.steady_state_examples_per_sec
    results = results_record(hp, test, validation, dropped, rate, train_seconds)
    try:
        logs.info("Curves: %s", summaries.write_curves(hp.job_dir))
    except ImportError as e:  # matplotlib missing: the run itself is fine
        logs.warning("no curves.png: %s (pip install matplotlib)", e)
    # After the curves (0.6 s at an hour's events): the end's time as the plan kept it, pictures included.
    results["wall_secs"] = round(time.monotonic() - processes.started_at(), 2)
    if budget:
        results.update(budget.record(test_eval_secs))
    logs.info(
        "Final test evaluation at step %d: accuracy %.4f, loss %.4f on %d images",
        results["global_step"],
        results["accuracy"],
        results["loss"],
        results["eval_examples"],
    )
    if final_export:
        results["final_export"] = final_export
        if hp.model_export_dir:
            results["model_export_dir"] = hp.model_export_dir
    config.write_json(storage.join(hp.job_dir, RESULTS_FILE), results)
    return results


def _final_validation(hp, estimator_, job_hooks: Hooks):
    """The last validation evaluation's metrics (None where the validation split was training data)."""
    if not hp.validates:
        return None
    if job_hooks.reporter.results:
        return job_hooks.reporter.results[-1]
    # A chief (unlike a master or a local run) leaves evaluation to the evaluator task; the tuning
    # service reads the chief's reports, so the chief evaluates the validation split once and reports it.
    validation = estimator_.evaluate(input_fn(hp, fmt.VALIDATION), name=fmt.VALIDATION)
    job_hooks.reporter.export(estimator_, None, estimator_.latest_checkpoint(), validation, True)
    return validation


def results_record(hp, test: dict, validation, dropped, examples_per_sec, train_seconds: float) -> dict:
    """results.json's record of the test and validation evaluations (a pure function of its inputs)."""
    results = {
        "global_step": int(test["global_step"]),
        "accuracy": float(test["accuracy"]),
        "loss": float(test["loss"]),
        "cross_entropy": float(test["cross_entropy"]),
        "eval_examples": int(test["eval_examples"]),
        "validation_accuracy": None if validation is None else float(validation["accuracy"]),
        "validation_loss": None if validation is None else float(validation["loss"]),
        "validation_examples": 0 if validation is None else int(validation["eval_examples"]),
        "examples_per_sec": None if examples_per_sec is None else round(examples_per_sec, 1),
        "train_seconds": round(train_seconds, 2),
        "train_subsets": list(hp.train_subsets),
        "precision": hp.precision,
    }
    if validation is None:
        results["validation_note"] = (
            "the validation split was training data (--train-subsets %s): no validation evaluation, tuning "
            "report or best-by-validation export" % " ".join(hp.train_subsets)
        )
    for key in ("accuracy_flip_tta", "accuracy_tta"):
        if key in test:
            results[key] = float(test[key])
    asked = [name for name, _ in hp.evaluation_images()[1]]
    results["final_views"] = ["plain"] + [v for v in asked if v not in dropped]
    if dropped:
        results["final_views_dropped"] = dropped
    return results


def _log_start(hp: hparams_lib.HParams, description: dict) -> None:
    if hp.verbose:
        v1.logging.info("Resolved hyperparameters: %s", json.dumps(description, sort_keys=True))
    derived = description["derived"]
    # The smoke job's check of a GPU image (docs/cloud.md): what TensorFlow found, said in its own words.
    logs.info("tf.config.list_physical_devices('GPU'): %s", tf.config.list_physical_devices("GPU"))
    length = (
        "%d steps" % hp.train_steps
        if hp.train_steps
        else "a time budget of %s" % (durations.format_clock(hp.time_budget))
    )
    logs.info(
        "%s, %s, %s of %d images, %s schedule (peak learning rate %.4g), %d tower(s) on "
        "%s, %d images per tower per step; all hyperparameters in %s",
        registry.describe(hp),
        hp.precision,
        length,
        derived["global_batch_size"],
        derived["learning_rate_schedule"],
        derived["peak_learning_rate"],
        len(derived["towers"]),
        ", ".join(derived["towers"]),
        derived["per_tower_batch_size"],
        storage.join(hp.job_dir, config.HPARAMS_FILE),
    )


def summary_lines(hp: hparams_lib.HParams, results: dict) -> list:
    """What a job says last (as Keras and Ultralytics end): the test accuracy, where its records and
    exports are, and the command that shows it in TensorBoard."""
    tta = [
        "%s %.2f%%" % (label, 100 * results[key])
        for label, key in (("flips", "accuracy_flip_tta"), ("flips and translations", "accuracy_tta"))
        if key in results
    ]
    lines = [
        "Done: test accuracy %.2f%% on %s images%s at step %d, in %s."
        % (
            100 * results["accuracy"],
            format(results["eval_examples"], ","),
            " (with %s)" % ", ".join(tta) if tta else "",
            results["global_step"],
            durations.format_clock(results["wall_secs"]),
        ),
        "  results:     %s (hparams.json, curves.png beside it)" % storage.join(hp.job_dir, RESULTS_FILE),
    ]
    if results.get("final_export"):
        lines.append("  exports:     %s (and the best by validation in export/best)" % results["final_export"])
    if results.get("model_export_dir"):
        lines.append(
            "  Vertex AI:   %s (AIP_MODEL_DIR: the final model, for gcloud ai models upload)"
            % results["model_export_dir"]
        )
    lines.append("  TensorBoard: tensorboard --logdir %s" % hp.job_dir)
    return lines


def run(hp: hparams_lib.HParams, stop=None, budget=None):
    """Trains and evaluates; returns the results dict on the chief, else None.

    ``stop``: a ``resilience.SignalStop``; a signal during training ends it with a checkpoint at the
    step reached and raises ``resilience.Interrupted`` before anything after training runs.
    ``budget``: for ``--time-budget``, an ``estimator.budget.job.BudgetedJob``: its hooks end training when the
    plan is done, and it keeps the test views that fit and records the run's time.
    """
    description = config.describe(hp)
    _log_start(hp, description)
    if writes_job_records(hp):
        config.save(hp)
    job_hooks = build_hooks(hp, stop, budget)
    # Validation evaluations get flip TTA only with --validation-flip-tta (a second
    # forward pass each); the test evaluation as --eval-flip-tta says.
    estimator_ = tf.estimator.Estimator(model_fn=model_fn, config=run_config(hp), params=hp.validation_hparams)
    train_seconds = train_by_policy(hp, estimator_, job_hooks)
    if stop is not None:
        stop.check()
    if not writes_job_records(hp):
        return None
    results = final_results(hp, estimator_, job_hooks, train_seconds)
    return results
