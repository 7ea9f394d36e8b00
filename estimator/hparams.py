"""The trainer's flags and the one hyperparameter object built from them.

``build_parser()`` defines the flags (the original tutorial's names and
defaults, plus a few of our own); ``from_args()`` validates them at the
boundary and returns a frozen ``HParams``, which ``model_fn`` receives as
``params`` and reads nothing else. Derived numbers (towers, per-tower batch,
learning-rate boundaries) come from the small pure functions below.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from dataclasses import dataclass

from estimator import cifar10_model, schedules
from estimator import cluster as cluster_lib
from estimator.model_base import COMPUTE_DTYPES

EVAL_POLICIES = ("periodic", "final")
HEALTH_ACTIONS = ("off", "warn", "stop")

@dataclass(frozen=True)
class HParams:
    """Resolved hyperparameters of one run; saved as JOB_DIR/hparams.json."""

    data_dir: str
    job_dir: str
    variable_strategy: str = "CPU"
    num_gpus: int = 1
    num_cpu_towers: int = 0
    num_layers: int = 44
    resnet_version: str = "v1"
    train_steps: int = 80000
    train_epochs: float = None
    train_batch_size: int = 128
    eval_batch_size: int = 100
    momentum: float = 0.9
    weight_decay: float = 2e-4
    learning_rate: float = 0.1
    lr_schedule: str = "piecewise"
    lr_decay_steps: tuple = None
    warmup_epochs: float = None
    lr_scaling: str = "none"
    nesterov: bool = False
    label_smoothing: float = 0.0
    precision: str = "fp32"
    eval_policy: str = "periodic"
    eval_flip_tta: bool = False
    export: bool = True
    use_distortion_for_training: bool = True
    sync: bool = False
    num_intra_threads: int = 0
    num_inter_threads: int = 0
    data_format: str = "channels_last"
    log_device_placement: bool = False
    batch_norm_decay: float = 0.997
    batch_norm_epsilon: float = 1e-5
    seed: int = None
    deterministic: bool = False
    save_checkpoints_steps: int = None
    save_checkpoints_secs: int = 600
    eval_throttle_secs: int = 60
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 100
    ps_wait_secs: int = 300
    verbose: bool = False
    histograms: bool = True
    # Health rules (estimator.health.rules: sources of the defaults there).
    health_checks: str = "warn"
    health_every_n_steps: int = 100
    health_init_loss_tolerance: float = 0.25
    health_vanishing_gradient: float = 1e-7
    health_exploding_factor: float = 10.0
    health_update_ratio_min: float = 1e-8
    health_update_ratio_max: float = 10.0
    health_dead_relu_fraction: float = 0.5
    health_dead_relu_window: int = 5
    health_input_mean_max: float = 0.5
    health_input_std_min: float = 0.1
    health_input_std_max: float = 1.0
    health_loss_window: int = 200
    health_loss_min_decrease: float = 0.01
    health_overtraining_evals: int = 3
    health_class_ratio: float = 0.25
    # From the environment, not flags: the number of training processes
    # (TF_CONFIG) and of training images (the data's manifest).
    num_workers: int = 1
    num_train_examples: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> HParams:
        return dataclasses.replace(self, **changes)


# -- derived values -----------------------------------------------------------


def tower_devices(num_gpus: int, num_cpu_towers: int):
    """Devices that each run one tower: GPUs, else N CPU devices, else the CPU."""
    if num_gpus > 0:
        return ["/gpu:%d" % i for i in range(num_gpus)]
    return ["/cpu:%d" % i for i in range(max(1, num_cpu_towers))]


def num_towers(hp: HParams) -> int:
    return len(tower_devices(hp.num_gpus, hp.num_cpu_towers))


def examples_per_step(batch_size: int, num_workers: int, sync: bool) -> int:
    """Training images behind one increment of the global step (see ``schedules``)."""
    return schedules.examples_per_step(batch_size, num_workers, sync)


def global_batch(hp: HParams) -> int:
    return examples_per_step(hp.train_batch_size, hp.num_workers, hp.sync)


def learning_rate_schedule(learning_rate: float, num_train_examples: int, batch_size: int,
                           num_workers: int = 1, sync: bool = False):
    """``(boundaries, values)`` of the piecewise-constant schedule, in global steps.

    Computed from the real training-set size, so it decays on small data sets
    and small batches too (the original used a hard-coded 45,000 images).
    """
    per_step = examples_per_step(batch_size, num_workers, sync)
    boundaries = schedules.piecewise_boundaries(num_train_examples, per_step)
    return boundaries, [learning_rate * factor for factor in schedules.DECAY_FACTORS]


def schedule(hp: HParams) -> dict:
    """Everything ``schedules.learning_rate`` needs, resolved from ``hp`` (and saved in hparams.json)."""
    batch = global_batch(hp)
    boundaries, factors = [], []
    if hp.lr_schedule == "piecewise" and hp.lr_decay_steps:
        boundaries = list(hp.lr_decay_steps)
        factors = schedules.step_decay_factors(len(boundaries))
    elif hp.lr_schedule == "piecewise":
        boundaries = schedules.piecewise_boundaries(hp.num_train_examples, batch)
        factors = list(schedules.DECAY_FACTORS[1:])
    return {
        "schedule": hp.lr_schedule,
        "peak": schedules.peak_learning_rate(hp.learning_rate, batch, hp.lr_scaling),
        "total_steps": hp.train_steps,
        "warmup": schedules.warmup_steps(hp.lr_schedule, hp.warmup_epochs, hp.train_steps,
                                         hp.num_train_examples, batch),
        "boundaries": boundaries,
        "factors": factors,
    }


# -- flags ----------------------------------------------------------------------


class _FlagFileParser(argparse.ArgumentParser):
    """``@FILE`` holds flags as on a command line: several per line, # comments."""

    def convert_arg_line_to_args(self, arg_line):
        return shlex.split(arg_line, comments=True)

    def error(self, message):
        # The message and where to look, not 40 lines of usage above it.
        self.exit(2, "%s: error: %s\n(%s --help lists the flags)\n" % (self.prog, message, self.prog))


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError("%r is not a boolean: use true or false" % text)


def _int(text: str) -> int:
    """An integer flag that also takes ``256.0``: tuning services send integer
    and discrete parameters that way."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % text) from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError("%r is not a whole number" % text)
    return int(value)


_int.__name__ = "int"  # argparse names the type in its messages: "invalid int value"


class _BoolFlag(argparse.Action):
    """``--x``, ``--no-x`` and ``--x=false``: a real boolean.

    The original parsed these with ``type=bool``, so ``--flag False`` was True;
    here an explicit value is parsed strictly, so old command lines keep working
    and mean what they say.
    """

    def __init__(self, option_strings, dest, default=None, help=None):
        strings = []
        for s in option_strings:
            strings.append(s)
            if s.startswith("--"):
                strings.append("--no-" + s[2:])
        super().__init__(strings, dest, nargs="?", default=default, help=help, metavar="BOOL")

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string.startswith("--no-"):
            if values is not None:
                parser.error("%s takes no value" % option_string)
            setattr(namespace, self.dest, False)
        else:
            try:
                setattr(namespace, self.dest, True if values is None else _bool(values))
            except argparse.ArgumentTypeError as e:
                parser.error("%s: %s" % (option_string, e))


def build_parser() -> argparse.ArgumentParser:
    d = HParams(data_dir="", job_dir="")
    p = _FlagFileParser(
        prog="python -m estimator.cifar10_main",
        description="Train and evaluate a CIFAR-10 ResNet with tf.estimator.",
        fromfile_prefix_chars="@",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", required=True,
                   help="Directory (or gs:// path) with the TFRecords of generate_cifar10_tfrecords.py.")
    p.add_argument("--job-dir", default=None,
                   help="Directory (or gs:// path) for checkpoints, summaries and results. "
                   "Defaults to $AIP_MODEL_DIR's parent on Vertex AI.")
    p.add_argument("--variable-strategy", choices=["CPU", "GPU"], default=d.variable_strategy,
                   help="Where variables live: CPU (a parameter-server layout) or spread over the GPUs.")
    p.add_argument("--num-gpus", type=_int, default=d.num_gpus,
                   help="GPUs to use, one tower each; 0 trains on the CPU.")
    p.add_argument("--num-cpu-towers", type=_int, default=d.num_cpu_towers,
                   help="With --num-gpus 0: run N towers on N CPU devices (tests the multi-GPU "
                   "logic on machines without GPUs; no speed-up).")
    p.add_argument("--num-layers", type=_int, default=d.num_layers,
                   help="ResNet depth, 6n+2: 20, 32, 44, 56, 110 ...")
    p.add_argument("--resnet-version", choices=list(cifar10_model.VERSIONS), default=d.resnet_version,
                   help="Residual unit: v1 (post-activation), v2 (pre-activation), bottleneck_v2 (9n+2).")
    p.add_argument("--train-steps", type=_int, default=None,
                   help="Global steps to train to (a restarted job resumes towards it); default %d."
                   % d.train_steps)
    p.add_argument("--train-epochs", type=float, default=None,
                   help="Train for this many passes over the training set instead of --train-steps "
                   "(rounded up to whole global steps).")
    p.add_argument("--train-batch-size", type=_int, default=d.train_batch_size,
                   help="Images per step on each worker, split over its towers.")
    p.add_argument("--eval-batch-size", type=_int, default=d.eval_batch_size,
                   help="Images per evaluation step, split over the towers.")
    p.add_argument("--momentum", type=float, default=d.momentum)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--learning-rate", type=float, default=d.learning_rate,
                   help="Peak rate (per %d images with --lr-scaling linear)." % schedules.REFERENCE_BATCH)
    p.add_argument("--lr-schedule", choices=schedules.SCHEDULES, default=d.lr_schedule,
                   help="piecewise: x0.1, x0.01, x0.002 after epochs 82, 123, 300 (the original); "
                   "cosine: half a cosine to 0 at the last step; onecycle: linear up, then linear to 0.")
    p.add_argument("--lr-decay-steps", type=_int, nargs="+", default=None, metavar="STEP",
                   help="piecewise only: divide the rate by 10 after each of these global steps "
                   "(He et al. 2016: 32000 48000) instead of after epochs 82, 123, 300.")
    p.add_argument("--warmup-epochs", type=float, default=None,
                   help="Linear warm-up to the peak rate over these epochs (default 0; onecycle: "
                   "the first 20%% of training).")
    p.add_argument("--lr-scaling", choices=schedules.SCALINGS, default=d.lr_scaling,
                   help="linear: multiply --learning-rate by global batch / %d (Goyal et al. 2017)."
                   % schedules.REFERENCE_BATCH)
    p.add_argument("--nesterov", action=_BoolFlag, default=d.nesterov,
                   help="Nesterov momentum.")
    p.add_argument("--label-smoothing", type=float, default=d.label_smoothing,
                   help="Training targets (1 - e) one-hot + e/10 (Szegedy et al. 2016); "
                   "evaluation reports the plain cross-entropy.")
    p.add_argument("--precision", choices=list(COMPUTE_DTYPES), default=d.precision,
                   help="Compute dtype of the network: fp32; bf16 (CPUs with AVX512-BF16/AMX, recent GPUs); "
                   "fp16 with dynamic loss scaling (GPUs). Variables and checkpoints stay float32.")
    p.add_argument("--eval-policy", choices=EVAL_POLICIES, default=d.eval_policy,
                   help="periodic: evaluate the validation split after each checkpoint (the original); "
                   "final: train without stopping, then evaluate once (short runs).")
    p.add_argument("--eval-flip-tta", action=_BoolFlag, default=d.eval_flip_tta,
                   help="Also report the final test accuracy with flip test-time augmentation "
                   "(mean of the image's and its mirror's probabilities), as accuracy_flip_tta.")
    p.add_argument("--export", action=_BoolFlag, default=d.export,
                   help="Export SavedModels: the best by validation accuracy after each evaluation "
                   "(JOB_DIR/export/best/<timestamp>) and the last checkpoint (JOB_DIR/export/final/<timestamp>).")
    p.add_argument("--use-distortion-for-training", action=_BoolFlag,
                   default=d.use_distortion_for_training,
                   help="Pad, randomly crop and flip training images.")
    p.add_argument("--sync", action="store_true",
                   help="Synchronous distributed training (one update from all workers).")
    p.add_argument("--num-intra-threads", type=_int, default=d.num_intra_threads,
                   help="Threads inside one op; 0 lets TensorFlow choose.")
    p.add_argument("--num-inter-threads", type=_int, default=d.num_inter_threads,
                   help="Ops run in parallel; 0 lets TensorFlow choose.")
    p.add_argument("--data-format", choices=["channels_first", "channels_last"], default=None,
                   help="Layout inside the model; default channels_first on GPUs, channels_last on CPUs.")
    p.add_argument("--log-device-placement", action="store_true")
    p.add_argument("--batch-norm-decay", type=float, default=d.batch_norm_decay)
    p.add_argument("--batch-norm-epsilon", type=float, default=d.batch_norm_epsilon)
    p.add_argument("--seed", type=_int, default=None,
                   help="Fixes initialisation, shuffling and distortion.")
    p.add_argument("--deterministic", action="store_true",
                   help="Deterministic ops (with --seed: identical runs on the CPU).")
    p.add_argument("--save-checkpoints-steps", type=_int, default=None,
                   help="Checkpoint (and then evaluate) every N steps instead of every "
                   "--save-checkpoints-secs.")
    p.add_argument("--save-checkpoints-secs", type=_int, default=d.save_checkpoints_secs)
    p.add_argument("--eval-throttle-secs", type=_int, default=d.eval_throttle_secs,
                   help="Do not evaluate more often than this.")
    p.add_argument("--keep-checkpoint-max", type=_int, default=d.keep_checkpoint_max)
    p.add_argument("--log-every-n-steps", type=_int, default=d.log_every_n_steps,
                   help="Log loss, learning rate, accuracy and examples/sec every N steps.")
    p.add_argument("--ps-wait-secs", type=_int, default=d.ps_wait_secs,
                   help="In a cluster, how long to wait for the parameter servers to answer before failing.")
    p.add_argument("--verbose", action="store_true",
                   help="Show TensorFlow's deprecation notices and the Estimator's bookkeeping lines "
                   "(hidden by default: one progress line per --log-every-n-steps instead).")
    p.add_argument("--histograms", action=_BoolFlag, default=d.histograms,
                   help="Weight and gradient histograms of each layer in TensorBoard.")
    h = p.add_argument_group(
        "health rules", "Checked in the graph every --health-every-n-steps steps and after each evaluation; "
        "each is a TensorBoard scalar health/<rule>, a log line and a JOB_DIR/health.json record when it "
        "fires. A NaN or infinite loss or gradient always stops training.")
    h.add_argument("--health-checks", choices=HEALTH_ACTIONS, default=d.health_checks,
                   help="What the rules do when they fire: off (not computed), warn, or stop training "
                   "(exit status 4).")
    h.add_argument("--health-every-n-steps", type=_int, default=d.health_every_n_steps)
    h.add_argument("--health-init-loss-tolerance", type=float, default=d.health_init_loss_tolerance,
                   help="Loss of the first step must be within this of ln(10) = 2.303 (Karpathy 2019).")
    h.add_argument("--health-vanishing-gradient", type=float, default=d.health_vanishing_gradient,
                   help="A layer whose mean |gradient| of the data loss is below this has vanishing gradients.")
    h.add_argument("--health-exploding-factor", type=float, default=d.health_exploding_factor,
                   help="The global gradient norm above this multiple of its running median is exploding.")
    h.add_argument("--health-update-ratio-min", type=float, default=d.health_update_ratio_min,
                   help="Lowest healthy learning rate x |gradient| / |weights| of a layer (CS231n: ~1e-3).")
    h.add_argument("--health-update-ratio-max", type=float, default=d.health_update_ratio_max)
    h.add_argument("--health-dead-relu-fraction", type=float, default=d.health_dead_relu_fraction,
                   help="More than this fraction of a layer's channels never active is a dead layer.")
    h.add_argument("--health-dead-relu-window", type=_int, default=d.health_dead_relu_window,
                   help="Checks (batches) over which a channel must never be active to count as dead.")
    h.add_argument("--health-input-mean-max", type=float, default=d.health_input_mean_max,
                   help="Largest |mean| of the input after the network's scaling x / 128 - 1.")
    h.add_argument("--health-input-std-min", type=float, default=d.health_input_std_min)
    h.add_argument("--health-input-std-max", type=float, default=d.health_input_std_max)
    h.add_argument("--health-loss-window", type=_int, default=d.health_loss_window,
                   help="Steps averaged to smooth the training loss for the not-decreasing rule.")
    h.add_argument("--health-loss-min-decrease", type=float, default=d.health_loss_min_decrease,
                   help="Relative decrease of the smoothed loss (last window against the first) below "
                   "which the loss is not decreasing.")
    h.add_argument("--health-overtraining-evals", type=_int, default=d.health_overtraining_evals,
                   help="Evaluations in a row with rising validation loss and falling training loss.")
    h.add_argument("--health-class-ratio", type=float, default=d.health_class_ratio,
                   help="A class whose validation accuracy is below this fraction of the others' mean.")
    return p


def visible_gpus() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def validate(args: argparse.Namespace, cluster: cluster_lib.Cluster, gpus_visible: int) -> None:
    """Raises ValueError naming the bad flag value and the fix."""
    def positive(name, value):
        if value is None or value <= 0:
            raise ValueError("--%s %s must be positive." % (name, value))

    cifar10_model.check_depth(args.num_layers, args.resnet_version)
    if args.train_steps is not None and args.train_epochs is not None:
        raise ValueError("--train-steps %d and --train-epochs %s both set the length of training: "
                         "keep one." % (args.train_steps, args.train_epochs))
    if args.train_epochs is not None:
        positive("train-epochs", args.train_epochs)
    if args.train_steps is not None:
        positive("train-steps", args.train_steps)
    if args.warmup_epochs is not None and args.warmup_epochs < 0:
        raise ValueError("--warmup-epochs %s must not be negative." % args.warmup_epochs)
    if args.lr_decay_steps is not None:
        if args.lr_schedule != "piecewise":
            raise ValueError("--lr-decay-steps sets the piecewise schedule's decays: drop it or use "
                             "--lr-schedule piecewise (not %s)." % args.lr_schedule)
        if any(b <= a for a, b in zip(args.lr_decay_steps, args.lr_decay_steps[1:])) or args.lr_decay_steps[0] < 1:
            raise ValueError("--lr-decay-steps %s must be positive and increasing, e.g. 32000 48000."
                             % " ".join(map(str, args.lr_decay_steps)))
    if not 0 <= args.label_smoothing < 1:
        raise ValueError("--label-smoothing %s must be in [0, 1), e.g. 0.1." % args.label_smoothing)
    for name in ("train_batch_size", "eval_batch_size", "learning_rate",
                 "batch_norm_epsilon", "log_every_n_steps", "keep_checkpoint_max",
                 "health_every_n_steps", "health_init_loss_tolerance", "health_exploding_factor",
                 "health_update_ratio_min", "health_update_ratio_max", "health_dead_relu_window",
                 "health_input_std_max", "health_loss_window", "health_overtraining_evals"):
        positive(name.replace("_", "-"), getattr(args, name))
    if args.save_checkpoints_steps is not None:
        positive("save-checkpoints-steps", args.save_checkpoints_steps)
    if args.health_update_ratio_min >= args.health_update_ratio_max:
        raise ValueError("--health-update-ratio-min %g must be below --health-update-ratio-max %g."
                         % (args.health_update_ratio_min, args.health_update_ratio_max))
    if args.health_input_std_min >= args.health_input_std_max:
        raise ValueError("--health-input-std-min %g must be below --health-input-std-max %g."
                         % (args.health_input_std_min, args.health_input_std_max))
    for name in ("health_dead_relu_fraction", "health_class_ratio"):
        if not 0 < getattr(args, name) < 1:
            raise ValueError("--%s %s must be in (0, 1)." % (name.replace("_", "-"), getattr(args, name)))
    if not 0 <= args.momentum < 1:
        raise ValueError("--momentum %s must be in [0, 1)." % args.momentum)
    if args.weight_decay < 0:
        raise ValueError("--weight-decay %s must not be negative." % args.weight_decay)
    if not 0 < args.batch_norm_decay < 1:
        raise ValueError("--batch-norm-decay %s must be in (0, 1), e.g. 0.997." % args.batch_norm_decay)
    for name in ("num_gpus", "num_cpu_towers", "num_intra_threads", "num_inter_threads"):
        if getattr(args, name) < 0:
            raise ValueError("--%s %d must not be negative." % (name.replace("_", "-"), getattr(args, name)))
    if args.num_gpus > 0 and args.num_cpu_towers > 0:
        raise ValueError("--num-cpu-towers %d is for CPU training: use it with --num-gpus 0."
                         % args.num_cpu_towers)
    if args.num_gpus > gpus_visible and cluster.task_type != "ps":
        raise ValueError(
            "--num-gpus %d but %d GPU(s) are visible: pass --num-gpus %d (0 trains on the CPU)."
            % (args.num_gpus, gpus_visible, gpus_visible))
    if args.variable_strategy == "GPU" and args.num_gpus == 0:
        raise ValueError("--variable-strategy GPU needs --num-gpus > 0: use --variable-strategy CPU.")
    towers = len(tower_devices(args.num_gpus, args.num_cpu_towers))
    for name in ("train_batch_size", "eval_batch_size"):
        value = getattr(args, name)
        if value % towers:
            raise ValueError(
                "--%s %d is not divisible by the %d towers: use a multiple of %d, e.g. %d."
                % (name.replace("_", "-"), value, towers, towers, (value // towers + 1) * towers))
    if args.deterministic and args.seed is None:
        raise ValueError("--deterministic needs --seed N, so that runs can repeat.")
    if args.sync and not cluster.distributed:
        raise ValueError("--sync synchronises workers of a distributed job; "
                         "this is a single local process (no TF_CONFIG cluster): drop --sync.")


def resolve_job_dir(job_dir):
    """--job-dir, else Vertex AI's AIP_MODEL_DIR parent (checkpoints live beside the model)."""
    if job_dir:
        return job_dir
    for var in ("AIP_CHECKPOINT_DIR", "AIP_MODEL_DIR"):
        if os.environ.get(var):
            return os.environ[var].rstrip("/")
    raise ValueError("--job-dir is required (or AIP_MODEL_DIR / AIP_CHECKPOINT_DIR on Vertex AI).")


def resolve_train_steps(args: argparse.Namespace, num_workers: int, num_train_examples: int) -> int:
    """--train-steps, or --train-epochs in global steps, or the default 80,000."""
    if args.train_epochs is not None:
        batch = examples_per_step(args.train_batch_size, num_workers, args.sync)
        return schedules.epochs_to_steps(args.train_epochs, max(1, num_train_examples), batch)
    return HParams.train_steps if args.train_steps is None else args.train_steps


def check_schedule(hp: HParams) -> None:
    """Raises ValueError when the warm-up leaves no steps for the schedule itself."""
    warmup = schedule(hp)["warmup"]
    if hp.lr_schedule != "piecewise" and warmup >= hp.train_steps:
        raise ValueError(
            "--warmup-epochs %s is %d steps, as long as the whole run (%d steps): the %s schedule "
            "would never decay. Use fewer warm-up epochs or train longer."
            % (hp.warmup_epochs, warmup, hp.train_steps, hp.lr_schedule))


def from_args(args: argparse.Namespace, cluster: cluster_lib.Cluster, num_train_examples: int,
              gpus_visible: int) -> HParams:
    """Validates parsed flags and returns the frozen hyperparameters."""
    args = argparse.Namespace(**vars(args))  # parsed flags are never mutated
    validate(args, cluster, gpus_visible)
    args.train_steps = resolve_train_steps(args, cluster.num_workers, num_train_examples)
    if args.lr_decay_steps is not None:
        args.lr_decay_steps = tuple(args.lr_decay_steps)
    data_format = args.data_format or ("channels_first" if args.num_gpus > 0 else "channels_last")
    fields = {f.name for f in dataclasses.fields(HParams)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    values.update(job_dir=resolve_job_dir(args.job_dir), data_format=data_format,
                  num_workers=cluster.num_workers, num_train_examples=num_train_examples)
    hp = HParams(**values)
    check_schedule(hp)
    return hp
