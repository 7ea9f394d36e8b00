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

from estimator import cifar10_format as fmt
from estimator import cluster as cluster_lib
from estimator import config, health, hooks, logs, storage, summaries
from estimator import hparams as hparams_lib
from estimator.cifar10 import Cifar10DataSet
from estimator.health import nonfinite
from estimator.model_fn import model_fn
from estimator.serving import exporters

v1 = tf.compat.v1

RESULTS_FILE = "results.json"


def input_fn(hp: hparams_lib.HParams, subset: str, seed=None):
    """An Estimator ``input_fn`` over one subset, built on the CPU."""
    training = subset == fmt.TRAIN
    batch_size = hp.train_batch_size if training else hp.eval_batch_size

    def fn():
        with tf.device("/cpu:0"):
            distort = training and hp.use_distortion_for_training
            data = Cifar10DataSet(hp.data_dir, subset, use_distortion=distort, seed=seed)
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
    return tf.estimator.RunConfig(
        model_dir=hp.job_dir,
        session_config=session_config(hp),
        tf_random_seed=hp.seed,
        save_checkpoints_steps=steps,
        save_checkpoints_secs=None if steps else hp.save_checkpoints_secs,
        keep_checkpoint_max=hp.keep_checkpoint_max,
        log_step_count_steps=hp.log_every_n_steps,
        save_summary_steps=min(100, hp.log_every_n_steps),
    )


def _training_rank(cluster: cluster_lib.Cluster) -> int:
    """0 for the chief, 1.. for workers: gives each worker its own data order."""
    if cluster.task_type == "worker":
        return cluster.task_index + (1 if any(cluster.spec.get(r) for r in ("master", "chief")) else 0)
    return 0


def _is_evaluator(hp: hparams_lib.HParams) -> bool:
    return hp.cluster.task_type == "evaluator"


def _writes_job_records(hp: hparams_lib.HParams) -> bool:
    """The chief (not an evaluator) writes hparams.json, results.json, the final export."""
    return hp.cluster.is_chief and not _is_evaluator(hp)


@dataclass
class Hooks:
    """What runs beside training and after each evaluation of one process."""

    train: list
    after_eval: list
    speed: hooks.ExamplesPerSecondHook
    reporter: hooks.EvalReporter


def build_hooks(hp: hparams_lib.HParams) -> Hooks:
    cluster = hp.cluster
    speed = hooks.ExamplesPerSecondHook(hp.train_batch_size)
    progress = hooks.ProgressHook(hp.train_steps, hp.train_batch_size, every_n_steps=hp.log_every_n_steps)
    # First in the list: it must see a NaN before the Estimator's own NanTensorHook does.
    train_hooks = [nonfinite.NonFiniteHook(hp.job_dir), speed, progress]
    # Vertex AI's TensorBoard reads its own directory (config: AIP_TENSORBOARD_LOG_DIR);
    # the Estimator writes beside the checkpoints.
    mirror = hp.tensorboard_dir
    monitor = health.HealthMonitor(hp, is_chief=cluster.is_chief or _is_evaluator(hp), mirror_dir=mirror)
    if hp.health_checks != "off" and not _is_evaluator(hp):
        train_hooks.append(health.HealthHook(monitor))
    eval_mirror = None
    if mirror:
        if cluster.is_chief:
            train_hooks.append(hooks.SummaryMirrorHook(mirror, min(100, hp.log_every_n_steps)))
        eval_mirror = storage.join(mirror, "eval_" + fmt.VALIDATION)
    reporter = hooks.EvalReporter(fmt.VALIDATION, mirror_dir=eval_mirror, trial=cluster.trial)
    after_eval = [reporter, health.EvalHealth(monitor, fmt.VALIDATION)]
    if hp.export:
        after_eval.append(exporters.BestAccuracyExporter(hp))
    return Hooks(train_hooks, after_eval, speed, reporter)


def train_by_policy(hp: hparams_lib.HParams, estimator_: tf.estimator.Estimator, job_hooks: Hooks) -> float:
    """Trains to ``hp.train_steps`` with the validation evaluations ``--eval-policy`` asks for;
    returns the seconds it took."""
    train_seed = None if hp.seed is None else hp.seed + _training_rank(hp.cluster)
    train_input = input_fn(hp, fmt.TRAIN, seed=train_seed)
    start = time.perf_counter()
    if hp.eval_policy == "final" and not hp.cluster.distributed:
        # Short runs: no evaluation until training is done, then one on the validation split.
        estimator_.train(train_input, max_steps=hp.train_steps, hooks=job_hooks.train)
        seconds = time.perf_counter() - start
        validation = estimator_.evaluate(input_fn(hp, fmt.VALIDATION), name=fmt.VALIDATION)
        for exporter in job_hooks.after_eval:
            exporter.export(estimator_, None, estimator_.latest_checkpoint(), validation, True)
        return seconds
    train_spec = tf.estimator.TrainSpec(train_input, max_steps=hp.train_steps, hooks=job_hooks.train)
    eval_spec = tf.estimator.EvalSpec(
        input_fn(hp, fmt.VALIDATION),
        steps=None,
        name=fmt.VALIDATION,
        exporters=job_hooks.after_eval,
        start_delay_secs=0,
        throttle_secs=hp.eval_throttle_secs,
    )
    tf.estimator.train_and_evaluate(estimator_, train_spec, eval_spec)
    return time.perf_counter() - start


def final_results(hp, estimator_, job_hooks: Hooks, train_seconds: float) -> dict:
    """On the chief after training: the final export, the test evaluation and results.json."""
    if hp.export:
        exporters.export_final(hp, estimator_.latest_checkpoint())
    test_estimator = estimator_
    if hp.eval_flip_tta != hp.validation_flip_tta:
        # The test evaluation's model_fn with the test split's TTA setting (hparams.json: derived).
        test_estimator = tf.estimator.Estimator(model_fn=model_fn, config=estimator_.config, params=hp)
    test = test_estimator.evaluate(input_fn(hp, fmt.TEST), name="test")
    if job_hooks.reporter.results:
        validation = job_hooks.reporter.results[-1]
    else:
        # A chief (unlike a master or a local run) leaves evaluation to the
        # evaluator task; the tuning service reads the chief's reports, so the
        # chief evaluates the validation split once and reports it.
        validation = estimator_.evaluate(input_fn(hp, fmt.VALIDATION), name=fmt.VALIDATION)
        job_hooks.reporter.export(estimator_, None, estimator_.latest_checkpoint(), validation, True)
    rate = job_hooks.speed.steady_state_examples_per_sec
    results = {
        "global_step": int(test["global_step"]),
        "accuracy": float(test["accuracy"]),
        "loss": float(test["loss"]),
        "cross_entropy": float(test["cross_entropy"]),
        "eval_examples": int(test["eval_examples"]),
        "validation_accuracy": float(validation["accuracy"]),
        "validation_loss": float(validation["loss"]),
        "validation_examples": int(validation["eval_examples"]),
        "examples_per_sec": None if rate is None else round(rate, 1),
        "train_seconds": round(train_seconds, 2),
    }
    if "accuracy_flip_tta" in test:
        results["accuracy_flip_tta"] = float(test["accuracy_flip_tta"])
    logs.info(
        "Final test evaluation at step %d: accuracy %.4f, loss %.4f on %d images",
        results["global_step"],
        results["accuracy"],
        results["loss"],
        results["eval_examples"],
    )
    config.write_json(storage.join(hp.job_dir, RESULTS_FILE), results)
    try:
        logs.info("Curves: %s", summaries.write_curves(hp.job_dir))
    except ImportError as e:  # matplotlib missing: the run itself is fine
        logs.warning("no curves.png: %s (pip install matplotlib)", e)
    return results


def _log_start(hp: hparams_lib.HParams, description: dict) -> None:
    if hp.verbose:
        v1.logging.info("Resolved hyperparameters: %s", json.dumps(description, sort_keys=True))
    derived = description["derived"]
    logs.info(
        "ResNet-%d %s, %s, %d steps of %d images, %s schedule (peak learning rate %.4g), %d tower(s) on "
        "%s, %d images per tower per step; all hyperparameters in %s",
        hp.num_layers,
        hp.resnet_version,
        hp.precision,
        hp.train_steps,
        derived["global_batch_size"],
        derived["learning_rate_schedule"],
        derived["peak_learning_rate"],
        len(derived["towers"]),
        ", ".join(derived["towers"]),
        derived["per_tower_batch_size"],
        storage.join(hp.job_dir, config.HPARAMS_FILE),
    )


def run(hp: hparams_lib.HParams):
    """Trains and evaluates; returns the results dict on the chief, else None."""
    description = config.describe(hp)
    _log_start(hp, description)
    if _writes_job_records(hp):
        config.save(hp)
    job_hooks = build_hooks(hp)
    # Validation evaluations get flip TTA only with --validation-flip-tta (a second
    # forward pass each); the test evaluation as --eval-flip-tta says.
    estimator_ = tf.estimator.Estimator(model_fn=model_fn, config=run_config(hp), params=hp.validation_hparams)
    train_seconds = train_by_policy(hp, estimator_, job_hooks)
    if not _writes_job_records(hp):
        return None
    return final_results(hp, estimator_, job_hooks, train_seconds)
