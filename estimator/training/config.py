"""From a command line and the environment to the run's one ``HParams``, and back from hparams.json.

The one place that reads the environment for a run:

* ``TF_CONFIG`` and ``CLOUD_ML_TRIAL_ID``: where this process stands in the
  job and its tuning trial (``estimator.common.cluster``);
* ``AIP_CHECKPOINT_DIR`` / ``AIP_MODEL_DIR``: Vertex AI's job directory when
  ``--job-dir`` is not given (already one per trial);
* ``AIP_TENSORBOARD_LOG_DIR``: Vertex AI's TensorBoard directory, which gets
  a copy of the summaries;
* ``AIP_MODEL_DIR``: where Vertex AI's model registry takes a model from, which
  gets a copy of the final export;
* ``CIFAR10_CACHE_DIR``: the speed probes' directory when ``--probe-cache`` names none.

``resolve`` also checks the data (every split against its manifest, before
any graph is built) and gives each tuning trial its own job directory.
Everything it resolved is recorded in ``JOB_DIR/hparams.json`` (``describe``);
``load`` reads it back (``python -m estimator.export``).
Used by every command that takes the trainer's flags: the trainer, the
pre-flight checks and the tuning study's flag check.
"""

from __future__ import annotations

import argparse
import json
import os

import tensorflow as tf

import estimator
from estimator.common import cluster as cluster_lib
from estimator.common import machine, storage
from estimator.common.options import DataFormat, EvalPolicy, Network, Precision
from estimator.data import records as fmt
from estimator.data.pipeline import Cifar10DataSet, MissingDataError, verify_splits  # noqa: F401 (MissingDataError: for callers)
from estimator.training import devices, flags, schedules
from estimator.training import hparams as hparams_lib
from estimator.training import machine as machine_plan

HPARAMS_FILE = "hparams.json"
JOB_DIR_VARIABLES = ("AIP_CHECKPOINT_DIR", "AIP_MODEL_DIR")
TENSORBOARD_VARIABLE = "AIP_TENSORBOARD_LOG_DIR"
MODEL_VARIABLE = "AIP_MODEL_DIR"


def job_dir_of(flag, environ) -> str:
    """--job-dir, else Vertex AI's AIP_CHECKPOINT_DIR or AIP_MODEL_DIR (checkpoints live beside the model)."""
    if flag:
        return flag
    for var in JOB_DIR_VARIABLES:
        if environ.get(var):
            return environ[var].rstrip("/")
    raise ValueError("--job-dir is required (or AIP_MODEL_DIR / AIP_CHECKPOINT_DIR on Vertex AI).")


def resolve(
    args: argparse.Namespace, environ=None, gpus_visible=None, given=frozenset(), choose=None
) -> hparams_lib.HParams:
    """Validates parsed trainer flags against the environment and the data; returns the frozen HParams.

    Args:
      args: from ``flags.build_parser()`` (or a parser that extends it); never mutated, and read only until
        the flags are ``HParams`` (``_settings``): what follows reads those.
      environ: the environment (default ``os.environ``).
      gpus_visible: GPUs TensorFlow sees (default: asks TensorFlow).
      given: the flags given by hand (``flags.given_flags(argv)``): ``--network auto`` keeps to them.
      choose: ``choose(hp, recorded, cpu, given) -> hp``, what resolves ``--time-budget``, ``--network auto``
        and ``--precision auto`` (``estimator.budget.job.choose``); a job that asks for none never needs it.

    Raises:
      ValueError, MissingDataError: naming the bad value and the fix.
    """
    environ = os.environ if environ is None else environ
    cluster = cluster_lib.from_environment(environ)
    flags.validate(args, cluster, devices.visible_gpus() if gpus_visible is None else gpus_visible)
    places = _places(args.job_dir, args.probe_cache, environ, cluster)
    hp = _with_data(_settings(vars(args), places, cluster))
    cpu = machine.cpu_info(environ=environ)
    hp = _checked_precision(hp, cpu)
    trains = hp.num_gpus == 0 and hp.cluster.task_type != "ps"  # a parameter server builds no training graph
    # What a restart keeps from its first run (the member, the filter-gradient plan, the speeds measured):
    # read only where something of it is used.
    asks = needs_choices(hp)
    earlier = _recorded(hp.job_dir) if asks or (trains and hp.precision == Precision.BF16) else {}
    if asks:
        if choose is None:
            raise ValueError(
                "--time-budget, --network auto and --precision auto are resolved by estimator.budget.job.resolve."
            )
        hp = choose(hp, earlier, cpu, given)
    hparams_lib.check_schedule(hp)
    if trains and hp.precision == Precision.BF16 and hp.filter_gradients is None:
        plan = earlier.get("filter_gradients")
        hp = hp.replace(filter_gradients=machine_plan.filter_gradient_plan(hp, cpu) if plan is None else plan)
    return hp


def needs_choices(hp: hparams_lib.HParams) -> bool:
    """Whether ``hp`` asks for what only the budget resolves: a time budget, ``--network`` or ``--precision auto``."""
    return bool(hp.time_budget) or hp.network == Network.AUTO or hp.precision == Precision.AUTO


def _settings(flag_values: dict, places: dict, cluster) -> hparams_lib.HParams:
    """The validated flags' values as ``HParams``, placed (where the job writes: ``_places``; its cluster),
    with the defaults that depend on other flags. Steps and the data's size come from ``_with_data``."""
    fields = set(hparams_lib.HParams.__dataclass_fields__)
    values = {k: v for k, v in flag_values.items() if k in fields}
    values.update(places)
    train_subsets = tuple(dict.fromkeys(values["train_subsets"]))  # in order, once each
    values.update(
        train_subsets=train_subsets,
        # Training on the validation split leaves nothing to validate on: train, then test.
        eval_policy=EvalPolicy.FINAL if fmt.VALIDATION in train_subsets else values["eval_policy"],
        lr_decay_steps=None if values["lr_decay_steps"] is None else tuple(values["lr_decay_steps"]),
        group_widths=None if values["group_widths"] is None else tuple(values["group_widths"]),
        data_format=values["data_format"]
        or (DataFormat.CHANNELS_FIRST if values["num_gpus"] else DataFormat.CHANNELS_LAST),
        cluster=cluster,
        num_workers=cluster.num_workers,
    )
    return hparams_lib.HParams(**values)


def _with_data(hp: hparams_lib.HParams) -> hparams_lib.HParams:
    """``hp`` with the training images its data holds (every split checked against the manifest, before
    any graph is built: a bad evaluation file would otherwise fail after training) and its steps:
    --train-steps, or --train-epochs in global steps, or the default 80,000 (none with --time-budget)."""
    num_train = 0 if hp.cluster.task_type == "ps" else verify_splits(hp.data_dir, hp.train_subsets)
    evaluated = {}
    if hp.cluster.task_type != "ps":
        data = Cifar10DataSet(hp.data_dir, fmt.TEST)
        evaluated = {s: data.num_examples_per_epoch(s) for s in (fmt.TEST, fmt.VALIDATION)}
    if hp.time_budget:
        steps = None
    elif hp.train_epochs is not None:
        steps = schedules.epochs_to_steps(hp.train_epochs, max(1, num_train), hp.global_batch_size)
    else:
        steps = hp.train_steps or hparams_lib.HParams.train_steps
    return hp.replace(num_train_examples=num_train, eval_examples=evaluated, train_steps=steps)


def _places(job_dir: str, probe_cache: str, environ, cluster) -> dict:
    """Where the job writes and what it reads from the environment for that: its directory (a tuning
    trial's its own), Vertex AI's TensorBoard and model directories, the probes' cache."""
    given = job_dir
    job_dir = job_dir_of(given, environ)
    if cluster.trial and given:
        # Parallel tuning trials must never share a checkpoint directory. Vertex AI's
        # AIP_CHECKPOINT_DIR / AIP_MODEL_DIR are per trial already (BASE/<trial>/...).
        job_dir = storage.join(job_dir, cluster.trial)
    tensorboard_dir = environ.get(TENSORBOARD_VARIABLE) or None
    if tensorboard_dir and tensorboard_dir.rstrip("/") == job_dir.rstrip("/"):
        tensorboard_dir = None  # the Estimator writes there already
    model_export_dir = environ.get(MODEL_VARIABLE) or None
    if model_export_dir and model_export_dir.rstrip("/") == job_dir.rstrip("/"):
        model_export_dir = None  # the job dir itself (no AIP_CHECKPOINT_DIR): its export/ holds the model
    return {
        "job_dir": job_dir,
        "tensorboard_dir": tensorboard_dir,
        "model_export_dir": model_export_dir,
        "probe_cache": probe_cache or machine.default_directory(environ),
    }


def _checked_precision(hp, cpu: dict):
    """``hp``, its precision checked against this CPU (``--precision auto`` is the budget's to choose)."""
    if hp.precision == Precision.BF16 and hp.num_gpus == 0 and cpu["isa"] not in machine.BF16_ISAS:
        held = "%s=%s" % (machine.ISA_VARIABLE, cpu["isa"])
        raise ValueError(
            "--precision bf16: %s holds oneDNN below bf16, where TensorFlow aborts: use fp32 or auto." % held
        )
    return hp


def _recorded(job_dir: str) -> dict:
    """What ``job_dir``'s hparams.json recorded ({} for a new job)."""
    path = storage.join(job_dir, HPARAMS_FILE)
    if not storage.exists(path):
        return {}
    return json.loads(storage.read_text(path)).get("hparams", {})


def parse(argv=None, parser=None, environ=None, choose=None):
    """``resolve`` for a command line: returns ``(hparams, parsed args)``; on bad input prints the
    message and exits with status 2 (argparse's convention), having written nothing."""
    parser = parser or flags.build_parser()
    args = parser.parse_args(argv)
    try:
        return resolve(args, environ, given=flags.given_flags(argv), choose=choose), args
    except (ValueError, MissingDataError) as e:
        parser.error(str(e))


def describe(hp: hparams_lib.HParams) -> dict:
    """What hparams.json records: the hyperparameters and the settings derived from them."""
    schedule = hp.schedule
    return {
        "hparams": hp.to_dict(),
        "derived": {
            "towers": hp.towers,
            "per_tower_batch_size": hp.train_batch_size // len(hp.towers),
            "global_batch_size": hp.global_batch_size,
            "learning_rate_schedule": schedule.name,
            "peak_learning_rate": schedule.peak,
            "warmup_steps": schedule.warmup,
            "learning_rate_boundaries": list(schedule.boundaries),
            "learning_rate_values": schedule.values,
            "validation_flip_tta": hp.validation_flip_tta,
            "test_flip_tta": hp.eval_flip_tta,
        },
        "cluster": {
            "task_type": hp.cluster.task_type,
            "task_index": hp.cluster.task_index,
            "num_workers": hp.num_workers,
            "trial": hp.cluster.trial,
        },
        "package_version": estimator.__version__,
        "tensorflow_version": tf.__version__,
    }


def write_json(path: str, value) -> None:
    """Writes a small JSON record (hparams.json, results.json) locally or to gs://."""
    storage.write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def save(hp: hparams_lib.HParams) -> str:
    """Writes JOB_DIR/hparams.json; returns its path."""
    path = storage.join(hp.job_dir, HPARAMS_FILE)
    write_json(path, describe(hp))
    return path


def load(job_dir: str) -> hparams_lib.HParams:
    """The HParams a job recorded in its hparams.json.

    Raises:
      FileNotFoundError: the job dir has no hparams.json.
      ValueError: it was trained with an option this version retired.
    """
    path = storage.join(job_dir, HPARAMS_FILE)
    if not storage.exists(path):
        raise FileNotFoundError(
            "%s not found: --job-dir must be a directory that python -m estimator.cifar10_main trained into." % path
        )
    recorded = json.loads(storage.read_text(path))["hparams"]
    hparams_lib.refuse_retired(job_dir, recorded, "export or serve")
    return hparams_lib.HParams.from_dict(recorded)
