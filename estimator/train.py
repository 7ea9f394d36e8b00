"""Runs one training job: ``tf.estimator`` training and evaluation plus the job's own records.

``run`` reads as its steps: record the hyperparameters (``JOB_DIR/hparams.json``),
build the hooks, train by the evaluation policy (periodic evaluations of the
validation split, what a tuning study may look at, or one at the end), then on
the chief: evaluate the held-out test split once and write ``JOB_DIR/results.json``
and ``curves.png``. The features (health rules, exports, the signal stop, the time
budget) are guests the entry point hands in (``estimator.training.guest``): the job
calls them at its steps and imports none of them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import tensorflow as tf

from estimator.common import cluster as cluster_lib
from estimator.common import durations, logs, processes, storage
from estimator.common.options import EvalPolicy
from estimator.data import records as fmt
from estimator.data.pipeline import Cifar10DataSet
from estimator.networks import registry
from estimator.reporting import summaries
from estimator.training import config, hooks, nonfinite
from estimator.training import hparams as hparams_lib
from estimator.training.model_fn import model_fn_with

v1 = tf.compat.v1

RESULTS_FILE = "results.json"
# How long a chief waits, beyond --eval-throttle-secs, for the evaluator to validate its final checkpoint.
EVALUATOR_WAIT_SECS = 600


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
            save_summary_steps=summary_steps(hp),
        )


def summary_steps(hp: hparams_lib.HParams) -> int:
    """Steps between two writes of the training summaries, in the job dir and in Vertex AI's TensorBoard's."""
    return hp.save_summary_steps or min(100, hp.log_every_n_steps)


def _training_rank(cluster: cluster_lib.Cluster) -> int:
    """0 for the chief, 1.. for workers: gives each worker its own data order."""
    if cluster.task_type == "worker":
        return cluster.task_index + (1 if any(cluster.spec.get(r) for r in ("master", "chief")) else 0)
    return 0


def _eval_dir(hp: hparams_lib.HParams) -> str:
    """Where the validation evaluations write (the Estimator's ``eval_<name>``)."""
    return storage.join(hp.job_dir, "eval_" + fmt.VALIDATION)


def _is_evaluator(hp: hparams_lib.HParams) -> bool:
    return hp.cluster.task_type == "evaluator"


def writes_job_records(hp: hparams_lib.HParams) -> bool:
    """The chief (not an evaluator) writes hparams.json, results.json, the final export."""
    return hp.cluster.is_chief and not _is_evaluator(hp)


@dataclass
class Hooks:
    """What runs beside training and after each evaluation of one process, the guests' included."""

    train: list
    after_eval: list
    speed: hooks.ExamplesPerSecondHook
    reporter: hooks.EvalReporter
    evaluation: list  # hooks of the evaluations during training
    saving_listeners: list  # told of each checkpoint training saves
    guests: tuple
    relay: hooks.EvaluatorRelay = None  # a chief's, beside an evaluator


def build_hooks(hp: hparams_lib.HParams, guests=()) -> Hooks:
    cluster, evaluator = hp.cluster, _is_evaluator(hp)
    speed = hooks.ExamplesPerSecondHook(hp.train_batch_size)
    # First in the list: it must see a NaN before the Estimator's own NanTensorHook does.
    train_hooks = [nonfinite.NonFiniteHook(hp.job_dir), speed]
    if hp.train_steps:  # under a time budget its guest brings the progress line, its total the plan
        train_hooks.append(hooks.ProgressHook(hp.train_steps, hp.train_batch_size, every_n_steps=hp.log_every_n_steps))
    # Vertex AI's TensorBoard reads its own directory (config: AIP_TENSORBOARD_LOG_DIR);
    # the Estimator writes beside the checkpoints.
    mirror = hp.tensorboard_dir
    eval_mirror = None
    if mirror:
        if cluster.is_chief:
            train_hooks.append(hooks.SummaryMirrorHook(mirror, summary_steps(hp)))
        eval_mirror = storage.join(mirror, "eval_" + fmt.VALIDATION)
    reporter = hooks.EvalReporter(fmt.VALIDATION, mirror_dir=eval_mirror, trial=cluster.trial)
    after_eval = [reporter] + ([hooks.EvalPictures(hp, fmt.VALIDATION)] if cluster.is_chief or evaluator else [])
    listeners, relay = [], None
    if cluster.distributed and cluster.task_type == "chief" and hp.validates:
        relay = hooks.EvaluatorRelay(_eval_dir(hp), trial=cluster.trial)
        listeners.append(relay)
    eval_hooks = []
    for guest in guests:
        train_hooks += guest.train_hooks()
        after_eval += guest.after_eval()
        eval_hooks += guest.eval_hooks()
        listeners += guest.saving_listeners()
    if evaluator and hp.validates:  # last: the chief waits for it, so every exporter has run
        after_eval.append(hooks.ValidationRecord(storage.join(_eval_dir(hp), hooks.VALIDATION_RECORD)))
    return Hooks(train_hooks, after_eval, speed, reporter, eval_hooks, listeners, tuple(guests), relay)


def _estimator(hp, run_config_, guests=()) -> tf.estimator.Estimator:
    return tf.estimator.Estimator(model_fn=model_fn_with(guests), config=run_config_, params=hp)


def train_by_policy(hp: hparams_lib.HParams, estimator_: tf.estimator.Estimator, job_hooks: Hooks) -> float:
    """Trains to ``hp.train_steps`` with the validation evaluations ``--eval-policy`` asks for;
    returns the seconds it took."""
    train_seed = None if hp.seed is None else hp.seed + _training_rank(hp.cluster)
    train_input = input_fn(hp, fmt.TRAIN, seed=train_seed)
    listeners = job_hooks.saving_listeners
    start = time.perf_counter()
    trains = all([guest.before_training(estimator_) for guest in job_hooks.guests])
    if hp.eval_policy == EvalPolicy.FINAL and not hp.cluster.distributed:
        # Short runs: no evaluation until training is done, then one on the validation split.
        if trains:
            estimator_.train(train_input, max_steps=hp.train_steps, hooks=job_hooks.train, saving_listeners=listeners)
        for guest in job_hooks.guests:
            guest.after_training()
        seconds = time.perf_counter() - start
        if not hp.validates:
            return seconds  # the validation split was training data
        validation = estimator_.evaluate(input_fn(hp, fmt.VALIDATION), name=fmt.VALIDATION)
        for exporter in job_hooks.after_eval:
            exporter.export(estimator_, None, estimator_.latest_checkpoint(), validation, True)
        return seconds
    train_spec = tf.estimator.TrainSpec(
        train_input, max_steps=hp.train_steps, hooks=job_hooks.train, saving_listeners=listeners
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
    for guest in job_hooks.guests:
        guest.after_training()
    return time.perf_counter() - start


def final_results(hp, estimator_, job_hooks: Hooks, train_seconds: float) -> dict:
    """On the chief after training: what the guests do first (the final export, the test views that fit), the test
    evaluation and results.json."""
    test_hp = hp
    for guest in job_hooks.guests:
        test_hp = guest.before_test(test_hp, estimator_)
    test_estimator = estimator_
    if (test_hp.eval_flip_tta, test_hp.eval_tta) != (hp.validation_flip_tta, False):
        # The test evaluation's model_fn with the test split's TTA setting (hparams.json: derived).
        test_estimator = _estimator(test_hp, estimator_.config)
    evaluation_started, ready = time.monotonic(), hooks.SessionReadyHook()
    test = test_estimator.evaluate(input_fn(test_hp, fmt.TEST), name="test", hooks=[ready])
    test_eval_secs = (ready.ready - evaluation_started, time.monotonic() - evaluation_started)
    validation = _final_validation(hp, estimator_, job_hooks)
    rate = job_hooks.speed.steady_state_examples_per_sec
    results = results_record(test_hp, test, validation, rate, train_seconds)
    try:
        logs.info("Curves: %s", summaries.write_curves(hp.job_dir))
    except ImportError as e:  # matplotlib missing: the run itself is fine
        logs.warning("no curves.png: %s (pip install matplotlib)", e)
    # After the curves (0.6 s at an hour's events): the end's time as the plan kept it, pictures included.
    results["wall_secs"] = round(time.monotonic() - processes.started_at(), 2)
    for guest in job_hooks.guests:
        results.update(guest.results(results, test_eval_secs))
    logs.info(
        "Final test evaluation at step %d: accuracy %.4f, loss %.4f on %d images",
        results["global_step"],
        results["accuracy"],
        results["loss"],
        results["eval_examples"],
    )
    config.write_json(storage.join(hp.job_dir, RESULTS_FILE), results)
    return results


def _final_validation(hp, estimator_, job_hooks: Hooks):
    """The last validation evaluation's metrics (None where the validation split was training data)."""
    if not hp.validates:
        return None
    if job_hooks.reporter.results:
        return job_hooks.reporter.results[-1]
    checkpoint = estimator_.latest_checkpoint()
    if hp.cluster.evaluator and job_hooks.relay is not None:
        step, wait = int(checkpoint.rsplit("-", 1)[-1]), hp.eval_throttle_secs + EVALUATOR_WAIT_SECS
        logs.info("Waiting for the evaluator's validation of step %d (at most %d s)", step, wait)
        record = storage.join(_eval_dir(hp), hooks.VALIDATION_RECORD)
        validation = job_hooks.relay.final_validation(record, step, wait)
        if validation is not None:
            return validation
        logs.warning("the evaluator did not validate step %d within %d s: the chief validates it", step, wait)
    # A chief (unlike a master or a local run) leaves evaluation to the evaluator task; the tuning
    # service reads the chief's reports, so without an evaluator's the chief evaluates the validation split once.
    validation = estimator_.evaluate(input_fn(hp, fmt.VALIDATION), name=fmt.VALIDATION)
    job_hooks.reporter.export(estimator_, None, checkpoint, validation, True)
    return validation


def results_record(hp, test: dict, validation, examples_per_sec, train_seconds: float) -> dict:
    """results.json's record of the test and validation evaluations (a pure function of its inputs; ``hp``: the
    test evaluation's, whose views it ran)."""
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
    results["final_views"] = ["plain"] + [name for name, _ in hp.evaluation_images()[1]]
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


def run(hp: hparams_lib.HParams, guests=()):
    """Trains and evaluates; returns the results dict on the chief, else None.

    ``guests``: the features of this job (``estimator.training.guest.Guest``), called at each step below; the
    entry point chooses them (``estimator.cifar10_main.job_guests``).
    """
    description = config.describe(hp)
    _log_start(hp, description)
    if writes_job_records(hp):
        config.save(hp)
    job_hooks = build_hooks(hp, guests)
    # Validation evaluations get flip TTA only with --validation-flip-tta (a second
    # forward pass each); the test evaluation as --eval-flip-tta says.
    estimator_ = _estimator(hp.validation_hparams, run_config(hp), guests)
    train_seconds = train_by_policy(hp, estimator_, job_hooks)
    if not writes_job_records(hp):
        return None
    return final_results(hp, estimator_, job_hooks, train_seconds)
