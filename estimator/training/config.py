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

from estimator.common import cluster as cluster_lib
from estimator.common import machine, storage, tensor_names
from estimator.common.options import DataFormat, EvalPolicy, Network, Precision
from estimator.data import records as fmt
from estimator.data.pipeline import MissingDataError, verify_splits  # noqa: F401 (MissingDataError: for callers)
from estimator.networks import family
from estimator.training import devices, flags, time_budget
from estimator.training import hparams as hparams_lib

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


def resolve(args: argparse.Namespace, environ=None, gpus_visible=None, given=frozenset()) -> hparams_lib.HParams:
    """Validates parsed trainer flags against the environment and the data; returns the frozen HParams.

    Args:
      args: from ``flags.build_parser()`` (or a parser that extends it); never mutated, and read only until
        the flags are ``HParams`` (``_settings``): what follows reads those.
      environ: the environment (default ``os.environ``).
      gpus_visible: GPUs TensorFlow sees (default: asks TensorFlow).
      given: the flags given by hand (``flags.given_flags(argv)``): ``--network auto`` keeps to them.

    Raises:
      ValueError, MissingDataError: naming the bad value and the fix.
    """
    environ = os.environ if environ is None else environ
    cluster = cluster_lib.from_environment(environ)
    flags.validate(args, cluster, devices.visible_gpus() if gpus_visible is None else gpus_visible)
    places = _places(args.job_dir, args.probe_cache, environ, cluster)
    hp = _with_data(_settings(vars(args), places, cluster))
    cpu = machine.cpu_info(environ=environ)
    # What a restart keeps from its first run (the member, the filter-gradient plan, the speeds measured):
    # read only where something of it is used.
    measures = hp.num_gpus == 0 and (hp.time_budget or hp.precision != Precision.FP32)
    earlier = _recorded(hp.job_dir) if hp.network == Network.AUTO or measures else {}
    speed = None
    if hp.network == Network.AUTO:
        chosen, speed = _choose_network(hp, earlier, cpu, given)
        hp = hp.replace(**chosen)
    hparams_lib.check_schedule(hp)
    return _measure_this_machine(_precision(hp, cpu), earlier, cpu, speed)


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
    from estimator.training import schedules

    num_train = 0 if hp.cluster.task_type == "ps" else verify_splits(hp.data_dir, hp.train_subsets)
    if hp.time_budget:
        steps = None
    elif hp.train_epochs is not None:
        steps = schedules.epochs_to_steps(hp.train_epochs, max(1, num_train), hp.global_batch_size)
    else:
        steps = hp.train_steps or hparams_lib.HParams.train_steps
    return hp.replace(num_train_examples=num_train, train_steps=steps)


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


def _precision(hp: hparams_lib.HParams, cpu: dict) -> hparams_lib.HParams:
    """``hp`` with its precision checked against this CPU, and ``--precision auto`` chosen by measurement."""
    if hp.precision == Precision.BF16 and hp.num_gpus == 0 and cpu["isa"] not in machine.BF16_ISAS:
        raise ValueError(
            "--precision bf16: %s=%s holds oneDNN below bf16 on this CPU, where TensorFlow 2.15 aborts on the "
            "first bf16 matrix product: use --precision fp32 or auto, or unset %s."
            % (machine.ISA_VARIABLE, cpu["isa"], machine.ISA_VARIABLE)
        )
    if hp.precision != Precision.AUTO:
        return hp
    from estimator.training import speed_probes

    measure = speed_probes.affordable(hp.time_budget)
    chosen, probe = speed_probes.choose(hp.replace(precision="fp32"), cpu=cpu, measure=measure)
    return hp.replace(precision=chosen, precision_probe=probe)


def _measure_this_machine(hp: hparams_lib.HParams, earlier: dict, cpu: dict, speed=None) -> hparams_lib.HParams:
    """What the graph and the budget's plan need to know about this CPU, resolved once and recorded in
    hparams.json: the bf16 filter-gradient plan (a restarted job keeps its first run's, so that its graph
    is the one its checkpoints were trained with, on any machine), and, for ``--time-budget``, this
    network's speeds (``speed``, where ``--network auto`` had them already; a restart on another CPU kind
    times its own, and plans from them)."""
    if hp.num_gpus > 0 or hp.cluster.task_type == "ps":  # a parameter server builds no training graph
        return hp
    from estimator.training import speed_probes

    if hp.precision == Precision.BF16:
        plan = earlier.get("filter_gradients")
        if plan is None:
            plan = _measure_filter_gradients(hp, cpu)
        hp = hp.replace(filter_gradients=plan)
    if hp.time_budget:
        here = machine.cpu_key(cpu)
        kept = earlier.get("speed_probe") or {}
        if speed is None and kept.get("cpu") == here:
            speed = kept
        elif speed is None:
            speed = speed_probes.network_speed(hp, cpu=cpu, measure=speed_probes.affordable(hp.time_budget))
            speed = speed and dict(speed, how="timed")
        hp = hp.replace(speed_probe=speed and dict(speed, cpu=here))
    return hp


def _measure_filter_gradients(hp: hparams_lib.HParams, cpu: dict) -> dict:
    """The bf16 filter-gradient plan of ``hp``'s training tower on this CPU: the tower's graph built (no
    session) at each image size training will see (``--progressive-resize``'s, else the full one), each
    candidate convolution's map timed on first use (cached), so that only the maps that occur are timed."""
    import tensorflow as tf

    from estimator.networks import registry
    from estimator.ops import filter_gradient

    # The largest images first: their maps decide the most sides of the smaller ones (``Measured``).
    sides = sorted({side for _, side in hp.image_sizes.changes()}, reverse=True) if hp.image_sizes else [fmt.HEIGHT]
    from estimator.training import speed_probes

    plan = filter_gradient.Measured(hp.probe_cache, cpu, measure=speed_probes.affordable(hp.time_budget))
    for side in sides:
        with tf.Graph().as_default():
            images = tf.compat.v1.placeholder(tf.float32, [hp.train_batch_size // len(hp.towers), side, side, 3])
            with tf.compat.v1.variable_scope(tensor_names.NETWORK_SCOPE):
                registry.build(hp, True, filter_gradients=plan).forward_pass(images)
    return plan.plan


def _choose_network(hp: hparams_lib.HParams, earlier: dict, cpu: dict, given):
    """``--network auto``: the member of airbench's family for ``hp``'s budget on this machine, as HParams
    values (its network, shape and augmentation, and ``network_choice``, the record of why), and its
    speeds (``HParams.speed_probe``; None where the choice was kept). A job dir that recorded a choice
    keeps it: the checkpoints are that member's."""
    speed = None
    if earlier.get("network_choice"):
        recorded = earlier["network_choice"]
        member, record = family.member(recorded["member"]), dict(recorded, kept_from_the_first_run=True)
        probe = earlier.get("precision_probe") or {}
    else:
        member, record, probe, speed = _measure_and_choose(hp, cpu, given)
    # The member's settings, but its augmentation where the command line gave one by hand.
    chosen_values = {k: v for k, v in member.settings().items() if k not in given or k not in family.AUGMENTATION}
    chosen_values["network_choice"] = record
    if hp.precision == Precision.AUTO:  # chosen with the reference member: not timed again
        chosen_values.update(precision=record["precision"], precision_probe=probe)
    return chosen_values, speed


def _measure_and_choose(hp: hparams_lib.HParams, cpu: dict, given: set):
    """Times the family's reference member (``_reference_speed``), estimates the others from it, times the
    training of those whose estimate leaves the choice open (``family.worth_timing``), and lets
    ``family.choose`` pick. All cached per CPU.
    Returns ``(member, record, precision probe, the chosen member's speeds)``."""
    from estimator.training import speed_probes

    measure = speed_probes.affordable(hp.time_budget)
    precision, probe, measured = _reference_speed(hp, cpu, measure)
    reference_speed = measured or dict(family.ASSUMED_REFERENCE_SPEED)
    rates = _estimated_rates(hp, given, precision, reference_speed, timed=bool(measured))
    always, views = time_budget.evaluation_images(hp)
    eval_speedup = time_budget.planned_eval_speedup(reference_speed, on_gpu=bool(hp.num_gpus))

    def training_secs(rate):  # each member's end at its own speed (the reference's evaluation ratio)
        return time_budget.training_secs(hp.time_budget, rate, always, views, eval_speedup=eval_speedup)

    step_cost = hp.image_sizes.mean_cost(0.0, 1.0) if hp.image_sizes else 1.0
    if measure:
        for name in family.worth_timing(rates, hp.num_train_examples, training_secs, step_cost):
            rates[name] = (_timed_training_rate(hp, cpu, name, precision)[0], "timed")
    member, record = family.choose(hp.time_budget, rates, hp.num_train_examples, training_secs, step_cost=step_cost)
    record["precision"] = str(precision)
    return member, record, probe, _chosen_speed(member.name, rates, reference_speed)


def _member_hp(hp: hparams_lib.HParams, member, precision) -> hparams_lib.HParams:
    """``hp`` with the network and shape of the family's ``member``, in ``precision``: what its probes time."""
    shape = {name: getattr(member, name) for name in family.SHAPE}
    return hp.replace(network=Network.AIRBENCH, precision=precision, **shape)


def _reference_speed(hp: hparams_lib.HParams, cpu: dict, measure: bool):
    """``(precision, precision probe, speeds)``: the precision ``--precision`` gives or ``auto`` chooses on
    the reference member, and the reference's ``{"train", "eval"}``
    images/s in it (None where nothing is cached and ``measure`` is False)."""
    from estimator.training import speed_probes

    reference = family.member(family.REFERENCE)
    precision, probe = hp.precision, {}
    if hp.precision == Precision.AUTO:
        reference_hp = _member_hp(hp, reference, Precision.FP32)
        precision, probe = speed_probes.choose(reference_hp, cpu=cpu, measure=measure)
    return precision, probe, speed_probes.network_speed(_member_hp(hp, reference, precision), cpu=cpu, measure=measure)


def _estimated_rates(hp: hparams_lib.HParams, given: set, precision, reference_speed: dict, timed: bool) -> dict:
    """``{member: (training images/s, how it was had)}`` for the candidates (a shape given by hand narrows
    the family): the reference's as timed (``timed``: else assumed), the others' estimated from it
    (``family.estimated_rate``)."""
    estimated = family.ESTIMATED
    if not timed:
        estimated += ", " + family.ASSUMED
    rates = {}
    for m in family.MEMBERS:
        if any(getattr(m, name) != getattr(hp, name) for name in family.SHAPE if name in given):
            continue
        if timed and m.name == family.REFERENCE:
            rates[m.name] = (reference_speed["train"], "timed")
        else:
            rates[m.name] = (family.estimated_rate(m.name, reference_speed["train"], precision), estimated)
    return rates


def _probe_hp(hp: hparams_lib.HParams, name: str, precision) -> hparams_lib.HParams:
    """``_member_hp`` of member ``name`` at its probe batch (``family.probe_batch``)."""
    batch = family.probe_batch(name, hp.train_batch_size)
    return _member_hp(hp, family.member(name), precision).replace(train_batch_size=batch)


def _timed_training_rate(hp: hparams_lib.HParams, cpu: dict, name: str, precision):
    """``(member name's training images/s, timed now)``: timed alone at its probe batch, or cached. Its
    evaluation is planned at the reference's ratio, as every member was compared (timed at the job's
    batches, members' own lay within 10% of it on the Zen 4 and 5), and timing it cost a first run 0.7-0.8 s
    more."""
    from estimator.training import speed_probes

    speed, now = speed_probes.timed_network_speed(_probe_hp(hp, name, precision), cpu=cpu, evaluate=False)
    return speed["train"], now


def _chosen_speed(name: str, rates: dict, reference_speed: dict) -> dict:
    """The chosen member's speeds as ``HParams.speed_probe`` records them: its training images/s as had,
    its evaluation's at the reference's ratio to training."""
    train, how = rates[name]
    ratio = reference_speed["eval"] / reference_speed["train"]
    speed = {"train": round(train, 1), "eval": round(train * ratio, 1), "how": how}
    if how == "timed" and name != family.REFERENCE:  # the reference's evaluation was timed, not this one's
        speed["eval_how"] = "at %s's ratio to training" % family.REFERENCE
    return speed


def _recorded(job_dir: str) -> dict:
    """What ``job_dir``'s hparams.json recorded ({} for a new job)."""
    path = storage.join(job_dir, HPARAMS_FILE)
    if not storage.exists(path):
        return {}
    return json.loads(storage.read_text(path)).get("hparams", {})


def parse(argv=None, parser=None, environ=None):
    """``resolve`` for a command line: returns ``(hparams, parsed args)``; on bad input prints the
    message and exits with status 2 (argparse's convention), having written nothing."""
    parser = parser or flags.build_parser()
    args = parser.parse_args(argv)
    try:
        return resolve(args, environ, given=flags.given_flags(argv)), args
    except (ValueError, MissingDataError) as e:
        parser.error(str(e))


def describe(hp: hparams_lib.HParams) -> dict:
    """What hparams.json records: the hyperparameters and the settings derived from them."""
    import tensorflow as tf

    import estimator

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
