"""Runs one training job: ``tf.estimator.train_and_evaluate`` plus the job's own records.

At start the resolved hyperparameters go to ``JOB_DIR/hparams.json``; the
periodic evaluations of ``train_and_evaluate`` use the validation split (what
a tuning study may look at); at the end the chief evaluates the held-out test
split once and writes ``JOB_DIR/results.json``.
"""

from __future__ import annotations

import json
import os
import time

import tensorflow as tf

import estimator
from estimator import cluster as cluster_lib
from estimator import health, hooks, logs, storage
from estimator import hparams as hparams_lib
from estimator.cifar10 import Cifar10DataSet
from estimator.health import nonfinite
from estimator.model_fn import model_fn
from estimator.serving import exporters

v1 = tf.compat.v1

# The split the tuning metric and periodic evaluations use, and the final one.
VALIDATION_SUBSET = "validation"
TEST_SUBSET = "eval"


def input_fn(hp: hparams_lib.HParams, subset: str, seed=None):
    """An Estimator ``input_fn`` over one subset, built on the CPU."""
    training = subset == "train"
    batch_size = hp.train_batch_size if training else hp.eval_batch_size

    def fn():
        with tf.device("/cpu:0"):
            data = Cifar10DataSet(hp.data_dir, subset, use_distortion=training and hp.use_distortion_for_training,
                                  seed=seed)
            return data.make_batch(batch_size)

    return fn


def session_config(hp: hparams_lib.HParams, cluster: cluster_lib.Cluster):
    config = v1.ConfigProto(
        allow_soft_placement=True,
        log_device_placement=hp.log_device_placement,
        intra_op_parallelism_threads=hp.num_intra_threads,
        inter_op_parallelism_threads=hp.num_inter_threads,
        gpu_options=v1.GPUOptions(force_gpu_compatible=True))
    if hp.num_gpus == 0 and hp.num_cpu_towers > 1:
        config.device_count["CPU"] = hp.num_cpu_towers
    if cluster.distributed and cluster.task_type in cluster_lib.TRAINING_ROLES:
        # A session_config of our own replaces the Estimator's, which would have
        # set these: without them the chief waits for every other worker
        # ("CreateSession still waiting") and can hang.
        config.device_filters.extend(["/job:ps", "/job:%s/task:%d" % (cluster.task_type, cluster.task_index)])
    return config


def run_config(hp: hparams_lib.HParams, cluster: cluster_lib.Cluster) -> tf.estimator.RunConfig:
    steps = hp.save_checkpoints_steps
    return tf.estimator.RunConfig(
        model_dir=hp.job_dir,
        session_config=session_config(hp, cluster),
        tf_random_seed=hp.seed,
        save_checkpoints_steps=steps,
        save_checkpoints_secs=None if steps else hp.save_checkpoints_secs,
        keep_checkpoint_max=hp.keep_checkpoint_max,
        log_step_count_steps=hp.log_every_n_steps,
        save_summary_steps=min(100, hp.log_every_n_steps))


def describe(hp: hparams_lib.HParams, cluster: cluster_lib.Cluster) -> dict:
    """What hparams.json records: the hyperparameters and the settings derived from them."""
    towers = hparams_lib.tower_devices(hp.num_gpus, hp.num_cpu_towers)
    sched = hparams_lib.schedule(hp)
    return {
        "hparams": hp.to_dict(),
        "derived": {
            "towers": towers,
            "per_tower_batch_size": hp.train_batch_size // len(towers),
            "global_batch_size": hparams_lib.global_batch(hp),
            "learning_rate_schedule": sched["schedule"],
            "peak_learning_rate": sched["peak"],
            "warmup_steps": sched["warmup"],
            "learning_rate_boundaries": sched["boundaries"],
            "learning_rate_values": [sched["peak"]] + [sched["peak"] * f for f in sched["factors"]]
            if sched["boundaries"] else [],
        },
        "cluster": {"task_type": cluster.task_type, "task_index": cluster.task_index,
                    "num_workers": cluster.num_workers, "trial": cluster.trial},
        "package_version": estimator.__version__,
        "tensorflow_version": tf.__version__,
    }


def write_json(path: str, value) -> None:
    """Writes a small JSON record (hparams.json, results.json) locally or to gs://."""
    storage.write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def _training_rank(cluster: cluster_lib.Cluster) -> int:
    """0 for the chief, 1.. for workers: gives each worker its own data order."""
    if cluster.task_type == "worker":
        return cluster.task_index + (1 if any(cluster.spec.get(r) for r in ("master", "chief")) else 0)
    return 0


def run(hp: hparams_lib.HParams, cluster: cluster_lib.Cluster):
    """Trains and evaluates; returns the results dict on the chief, else None."""
    description = describe(hp, cluster)
    if hp.verbose:
        v1.logging.info("Resolved hyperparameters: %s", json.dumps(description, sort_keys=True))
    derived = description["derived"]
    logs.info("ResNet-%d %s, %s, %d steps of %d images, %s schedule (peak learning rate %.4g), %d tower(s) on "
              "%s, %d images per tower per step; all hyperparameters in %s", hp.num_layers, hp.resnet_version,
              hp.precision, hp.train_steps, derived["global_batch_size"], derived["learning_rate_schedule"],
              derived["peak_learning_rate"], len(derived["towers"]), ", ".join(derived["towers"]),
              derived["per_tower_batch_size"], storage.join(hp.job_dir, "hparams.json"))
    if cluster.is_chief and cluster.task_type != "evaluator":
        write_json(storage.join(hp.job_dir, "hparams.json"), description)

    config = run_config(hp, cluster)
    # Flip test-time augmentation costs a second forward pass: only the final test evaluation pays it.
    estimator_ = tf.estimator.Estimator(model_fn=model_fn, config=config, params=hp.replace(eval_flip_tta=False))
    speed = hooks.ExamplesPerSecondHook(hp.train_batch_size)
    progress = hooks.ProgressHook(hp.train_steps, hp.train_batch_size, every_n_steps=hp.log_every_n_steps)
    # First in the list: it must see a NaN before the Estimator's own NanTensorHook does.
    train_hooks = [nonfinite.NonFiniteHook(hp.job_dir), speed, progress]
    # Vertex AI's TensorBoard reads its own directory; the Estimator writes beside the checkpoints.
    tensorboard_dir = os.environ.get("AIP_TENSORBOARD_LOG_DIR")
    mirror = tensorboard_dir if tensorboard_dir and tensorboard_dir.rstrip("/") != hp.job_dir.rstrip("/") else None
    monitor = health.HealthMonitor(hp, is_chief=cluster.is_chief or cluster.task_type == "evaluator",
                                   mirror_dir=mirror)
    if hp.health_checks != "off" and cluster.task_type != "evaluator":
        train_hooks.append(health.HealthHook(monitor))
    eval_mirror = None
    if mirror:
        if cluster.is_chief:
            train_hooks.append(hooks.SummaryMirrorHook(mirror, min(100, hp.log_every_n_steps)))
        eval_mirror = storage.join(mirror, "eval_" + VALIDATION_SUBSET)
    reporter = hooks.EvalReporter(VALIDATION_SUBSET, mirror_dir=eval_mirror, trial=cluster.trial)
    after_eval = [reporter, health.EvalHealth(monitor, VALIDATION_SUBSET)]
    if hp.export:
        after_eval.append(exporters.BestAccuracyExporter(hp))
    train_seed = None if hp.seed is None else hp.seed + _training_rank(cluster)
    train_spec = tf.estimator.TrainSpec(input_fn(hp, "train", seed=train_seed),
                                        max_steps=hp.train_steps, hooks=train_hooks)
    eval_spec = tf.estimator.EvalSpec(input_fn(hp, VALIDATION_SUBSET), steps=None,
                                      name=VALIDATION_SUBSET, exporters=after_eval,
                                      start_delay_secs=0, throttle_secs=hp.eval_throttle_secs)
    start = time.perf_counter()
    if hp.eval_policy == "final" and not cluster.distributed:
        # Short runs: no evaluation until training is done, then one on the validation split.
        estimator_.train(train_spec.input_fn, max_steps=hp.train_steps, hooks=train_spec.hooks)
        train_seconds = time.perf_counter() - start
        validation = estimator_.evaluate(input_fn(hp, VALIDATION_SUBSET), name=VALIDATION_SUBSET)
        for exporter in after_eval:
            exporter.export(estimator_, None, estimator_.latest_checkpoint(), validation, True)
    else:
        tf.estimator.train_and_evaluate(estimator_, train_spec, eval_spec)
        train_seconds = time.perf_counter() - start
    if not cluster.is_chief or cluster.task_type == "evaluator":
        return None

    if hp.export:
        exporters.export_final(hp, estimator_.latest_checkpoint())
    test_estimator = estimator_
    if hp.eval_flip_tta:
        test_estimator = tf.estimator.Estimator(model_fn=model_fn, config=config, params=hp)
    test = test_estimator.evaluate(input_fn(hp, TEST_SUBSET), name="test")
    if reporter.results:
        validation = reporter.results[-1]
    else:
        # A chief (unlike a master or a local run) leaves evaluation to the
        # evaluator task; the tuning service reads the chief's reports, so the
        # chief evaluates the validation split once and reports it.
        validation = estimator_.evaluate(input_fn(hp, VALIDATION_SUBSET), name=VALIDATION_SUBSET)
        reporter.export(estimator_, None, estimator_.latest_checkpoint(), validation, True)
    rate = speed.steady_state_examples_per_sec
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
    logs.info("Final test evaluation at step %d: accuracy %.4f, loss %.4f on %d images",
              results["global_step"], results["accuracy"], results["loss"], results["eval_examples"])
    write_json(storage.join(hp.job_dir, "results.json"), results)
    try:
        logs.info("Curves: %s", health.write_curves(hp.job_dir))
    except ImportError as e:  # matplotlib missing: the run itself is fine
        logs.warning("no curves.png: %s (pip install matplotlib)", e)
    return results
