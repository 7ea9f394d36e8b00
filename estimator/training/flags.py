"""The trainer's flags: ``build_parser()`` (the original tutorial's names and defaults, plus our own,
in groups by concern) and ``validate()``, which checks them at the boundary, naming the bad value and
the fix. ``estimator.training.config`` turns the parsed flags and the environment into ``HParams``.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys

from estimator.common import durations
from estimator.common.cluster import Cluster
from estimator.common.options import LrSchedule, Network, ResNetVersion, VariableStrategy
from estimator.data import pipeline
from estimator.data import records as fmt
from estimator.networks import airbench, registry, resnet
from estimator.networks.layers import COMPUTE_DTYPES, DATA_FORMATS
from estimator.training import devices, recipes, schedules
from estimator.training.hparams import (
    AUTO,
    EVAL_POLICIES,
    HEALTH_ACTIONS,
    NONNEGATIVE,
    RETIRED,
    HParams,
    flag_name,
    health_thresholds,
)


class _FlagFileParser(argparse.ArgumentParser):
    """``@FILE`` holds flags as on a command line: several per line, # comments; ``--recipe NAME`` stands
    for a recipe's flags at its place (``recipes.expand``)."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        try:
            # @FILE first (argparse's own reading of them), so that a --recipe inside one is expanded too.
            args = recipes.expand(self._read_args_from_files(args))
        except ValueError as e:
            self.error(str(e))
        return super().parse_known_args(args, namespace)

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


_int.__name__ = "int"


def _float(text: str) -> float:
    """A float flag that refuses NaN and infinities (a NaN rate would stop training at step 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number" % text) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError("%r is not a finite number" % text)
    return value


_float.__name__ = "float"


# argparse names the type in its messages: "invalid int value"


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


class _Retired(argparse.Action):
    """A retired flag: refused with one line saying so, and hidden from ``--help``."""

    def __init__(self, option_strings, dest, why, **kwargs):
        self.why = why
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, default=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error("%s was retired in 0.3.0 (%s; docs/experiments.md): drop it." % (option_string, self.why))


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each flag's help ends with its default, once: added here unless the help already states it
    (flags whose default depends on others say so in their own words)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.required or action.default is argparse.SUPPRESS or "default" in text or action.nargs == 0:
            return text
        value = action.default
        if isinstance(value, bool):
            shown = "on" if value else "off"
        elif isinstance(value, (list, tuple)):
            shown = " ".join(str(v) for v in value)
        elif value is None:
            return text
        else:
            shown = str(value)
        return "%s (default: %s)" % (text, shown.replace("%", "%%"))


DESCRIPTION = """\
Train and evaluate a CIFAR-10 classifier with tf.estimator: the ResNets of He et al. 2016, or the
network of Keller Jordan's airbench (--network airbench, or auto: chosen for the time budget), one tower
per device, evaluated, exported and reported to the tuning service. Recipes hold tested flags, shipped
with the package; put one first, later flags override it:

  python -m estimator.cifar10_main --recipe cpu_5min --data-dir DIR --job-dir JOB

  cpu_5min, cpu_30min   the best model a 5- or 30-minute budget buys on this machine
  he2016_resnet56       He et al. 2016's ResNet-56 schedule (GPUs)
  tutorial_defaults     the original tutorial's flags

--recipe also takes a file; @FILE reads flags from a file (several per line, # comments). Booleans
take --x, --no-x or --x=true|false.
"""


def build_parser() -> argparse.ArgumentParser:
    d = HParams(data_dir="", job_dir="")
    p = _FlagFileParser(
        prog="python -m estimator.cifar10_main",
        usage="%(prog)s [--recipe NAME] --data-dir DIR --job-dir DIR [flags]",
        description=DESCRIPTION,
        epilog="More: docs/training.md (every flag, time budgets, what a job writes), docs/health.md.",
        fromfile_prefix_chars="@",
        formatter_class=_HelpFormatter,
    )

    def adder(group):
        def flag(name, help, **kw):
            """A flag whose default is its HParams field's (unless ``default`` is given)."""
            kw.setdefault("default", getattr(d, name[2:].replace("-", "_")))
            if kw.get("action") is _BoolFlag:
                kw.pop("type", None)
            elif "choices" not in kw:
                kw.setdefault("metavar", {_int: "N", _float: "X"}.get(kw.get("type"), "DIR"))
            group.add_argument(name, help=help, **kw)

        return flag

    # -- job, data and logs ------------------------------------------------------------------
    flag = adder(p.add_argument_group("job, data and logs"))
    flag(
        "--data-dir",
        "Directory (or gs:// path) with the TFRecords of generate_cifar10_tfrecords.py. Required.",
        required=True,
        default=None,
    )
    flag(
        "--job-dir",
        "Directory (or gs:// path) for checkpoints, summaries, exports and results. Required, except on Vertex "
        "AI, where the default is $AIP_CHECKPOINT_DIR, else $AIP_MODEL_DIR.",
        default=None,
    )
    flag(
        "--recipe",
        "A recipe's flags at this place: %s (shipped with the package), or a flag file; later flags "
        "override them. Recorded in hparams.json (default: none)." % ", ".join(recipes.names()),
        default=None,
        metavar="NAME",
    )
    flag(
        "--probe-cache",
        "Where the speed probes (--precision auto, --network auto, --time-budget's evaluation speed, bf16 "
        "filter gradients) keep what they measured, a local or gs:// directory: jobs and a study's trials "
        "that name one share the first one's measurements, as in the cloud every job starts on a new machine "
        "(default: $CIFAR10_CACHE_DIR, else ~/.cache/cifar10-resnet-estimator).",
        default=None,
    )
    flag(
        "--train-subsets",
        "What training reads. 'train validation' trains a final model on 50,000 images (He et al.): then there "
        "is no validation evaluation, tuning report or best-by-validation export.",
        nargs="+",
        choices=[fmt.TRAIN, fmt.VALIDATION],
        metavar="SUBSET",
    )
    flag(
        "--seed",
        "Fixes initialisation, shuffling and distortion (default: a new draw each run).",
        type=_int,
        default=None,
    )
    flag("--deterministic", "Deterministic ops (with --seed: identical runs on the CPU).", action=_BoolFlag)
    flag("--log-every-n-steps", "Log loss, learning rate, accuracy and examples/sec every N steps.", type=_int)
    flag(
        "--verbose",
        "Show TensorFlow's deprecation notices and the Estimator's bookkeeping lines, not only one progress "
        "line per --log-every-n-steps.",
        action=_BoolFlag,
    )
    flag("--histograms", "Weight and gradient histograms of each layer in TensorBoard.", action=_BoolFlag)

    # -- network -----------------------------------------------------------------------------
    flag = adder(p.add_argument_group("network"))
    flag(
        "--network",
        "resnet: the 6n+2-layer ResNets of He et al. (--num-layers, --resnet-version); airbench: the network of "
        "Keller Jordan's airbench94 (a fixed whitening layer and three groups of convolutions, 64/256/256 "
        "filters), which learns more per epoch of a short run; auto (with --time-budget): the member of "
        "airbench's family (widths 0.25 to 1, airbench94's or airbench96's groups, each with its augmentation) "
        "expected to be most accurate for the epochs this machine affords in the budget, from its measured "
        "speed (--group-depth or --width-multiplier given by hand narrow the choice).",
        choices=list(registry.NETWORKS),
    )
    flag("--num-layers", "ResNet depth, 6n+2: 20, 32, 44, 56, 110 ...", type=_int)
    flag(
        "--resnet-version",
        "Residual unit: v1 (post-activation), v2 (pre-activation), bottleneck_v2 (9n+2).",
        choices=list(resnet.VERSIONS),
    )
    flag(
        "--group-depth",
        "--network airbench: 3x3 convolutions per group, 2 (airbench94's) or 3 (airbench96's: a residual "
        "connection around the last two; about 1.36x the FLOPs per image).",
        type=_int,
        choices=list(airbench.GROUP_DEPTHS),
    )
    flag(
        "--width-multiplier", "Filters of every layer times this (16, 32, 64 at 1; 8 x it a whole number).", type=_float
    )
    flag(
        "--zero-init-residual",
        "Start the last batch norm of each v1 residual unit at 0 (Goyal et al. 2017).",
        action=_BoolFlag,
    )
    flag(
        "--batch-norm-decay",
        "Decay of the batch-norm moving averages (0.9 for runs of a few hundred steps).",
        type=_float,
    )
    flag("--batch-norm-epsilon", "Added to the batch variance before its square root.", type=_float)

    # -- optimisation and schedule ----------------------------------------------------------------
    flag = adder(p.add_argument_group("optimisation and schedule"))
    flag(
        "--train-steps",
        "Global steps to train to (a restarted job resumes towards it); default %d." % d.train_steps,
        type=_int,
        default=None,
    )
    flag(
        "--train-epochs",
        "Train for this many passes over the training set instead of --train-steps (rounded up to whole "
        "global steps; default: off).",
        type=_float,
        default=None,
    )
    flag("--train-batch-size", "Images per step on each worker, split over its towers.", type=_int)
    flag(
        "--learning-rate",
        "Peak rate (per %d images with --lr-scaling linear)." % schedules.REFERENCE_BATCH,
        type=_float,
    )
    flag(
        "--lr-schedule",
        "piecewise: x0.1, x0.01, x0.002 after epochs 82, 123, 300 (the original); "
        "cosine: half a cosine to 0 at the last step; onecycle: linear up, then linear to 0.",
        choices=schedules.SCHEDULES,
    )
    flag(
        "--lr-decay-steps",
        "piecewise only: divide the rate by 10 after each of these global steps (He et al. 2016: 32000 48000; "
        "default: after epochs 82, 123, 300).",
        type=_int,
        nargs="+",
        default=None,
        metavar="STEP",
    )
    flag(
        "--warmup-epochs",
        "Linear warm-up to the peak rate over these epochs (default 0; onecycle: the first 20%% of training).",
        type=_float,
        default=None,
    )
    flag(
        "--lr-scaling",
        "linear: multiply --learning-rate by global batch / %d (Goyal et al. 2017)." % schedules.REFERENCE_BATCH,
        choices=schedules.SCALINGS,
    )
    flag("--momentum", "Momentum of SGD, in [0, 1).", type=_float)
    flag("--nesterov", "Nesterov momentum.", action=_BoolFlag)
    flag("--weight-decay", "L2 penalty on every weight, added to the loss.", type=_float)
    flag(
        "--label-smoothing",
        "Training targets (1 - e) one-hot + e/10 (Szegedy et al. 2016); evaluation reports the plain cross-entropy.",
        type=_float,
    )
    flag(
        "--ema-decay",
        "Evaluate and export an exponential moving average of the weights with this decay "
        "(e.g. 0.999; 0 off). Its early updates use min(decay, (1+step)/(10+step)).",
        type=_float,
    )
    flag(
        "--lookahead",
        "airbench's Lookahead (Zhang et al. 2019): every 5 steps the weights and a slow copy of them (in the "
        "checkpoint) move to slow + (1 - a) (weights - slow), a = 0.95^5 x (fraction of training done)^3: no pull "
        "early on, an average of the last steps by the end.",
        action=_BoolFlag,
    )

    # -- time budget and precision --------------------------------------------------------------
    flag = adder(p.add_argument_group("time budget and precision"))
    flag(
        "--time-budget",
        "Train for what fits in this much time (90s, 5m, 1h30m or seconds): the whole command, final "
        "evaluations and exports included, ends within it. Plans the steps from measured speed and re-plans as it "
        "drifts; the schedule (cosine or onecycle) reaches 0 at the end of the budget. Instead of --train-steps "
        "(default: off).",
        type=durations.flag,
        default=None,
        metavar="DURATION",
    )
    flag(
        "--precision",
        "Compute dtype of the network: fp32; bf16 (CPUs with AVX512-BF16/AMX, recent GPUs); "
        "fp16 with dynamic loss scaling (GPUs); auto: the faster of fp32 and bf16 on this CPU, by a timed "
        "probe of the network (cached; never bf16 without native support). Variables and checkpoints stay float32.",
        choices=list(COMPUTE_DTYPES) + [AUTO],
    )

    # -- augmentation -----------------------------------------------------------------------------
    flag = adder(p.add_argument_group("augmentation"))
    flag("--use-distortion-for-training", "Pad, randomly crop and flip training images.", action=_BoolFlag)
    flag(
        "--crop-padding",
        "Pad training images by this many zero pixels on each side before the random 32x32 crop (4: He et al. "
        "2016; 0: flips only).",
        type=_int,
    )
    flag(
        "--cutout",
        "After the crop, grey out a square of this many pixels a side of each training image, centred on a "
        "random pixel (DeVries & Taylor 2017); 0: none.",
        type=_int,
    )
    flag(
        "--progressive-resize",
        "Train on images scaled down to this many pixels a side (%d to %d) at first, growing in steps of %d "
        "pixels to 32 by --progressive-resize-until of training; evaluation sees 32. Smaller steps are faster "
        "(a step's time follows its pixels), so a time budget buys more of them. 0: off."
        % (schedules.MIN_RESIZE, fmt.HEIGHT - 1, schedules.RESIZE_STEP),
        type=_int,
    )
    flag(
        "--progressive-resize-until",
        "With --progressive-resize: the fraction of training (of the time budget's plan, or of the steps) "
        "from which images are full size.",
        type=_float,
    )

    # -- evaluation, checkpoints and export ---------------------------------------------------------
    flag = adder(p.add_argument_group("evaluation, checkpoints and export"))
    flag(
        "--eval-policy",
        "periodic: evaluate the validation split after each checkpoint (the original); "
        "final: train without stopping, then evaluate once (short runs).",
        choices=EVAL_POLICIES,
    )
    flag("--eval-batch-size", "Images per evaluation step, split over the towers.", type=_int)
    flag(
        "--eval-flip-tta",
        "Also report the final test accuracy with flip test-time augmentation "
        "(mean of the image's and its mirror's probabilities), as accuracy_flip_tta.",
        action=_BoolFlag,
    )
    flag(
        "--eval-tta",
        "Also report the final test accuracy with flips and 1-pixel translations (6 views, airbench's "
        "weights), as accuracy_tta.",
        action=_BoolFlag,
    )
    flag(
        "--validation-flip-tta",
        "Flip TTA in the validation evaluations during training too (a second forward pass "
        "each; --eval-flip-tta alone keeps it to the final test evaluation).",
        action=_BoolFlag,
    )
    flag(
        "--save-checkpoints-secs",
        "Checkpoint (and with --eval-policy periodic, evaluate) every this many seconds.",
        type=_int,
    )
    flag(
        "--save-checkpoints-steps",
        "Checkpoint every N steps instead of every --save-checkpoints-secs (default: off).",
        type=_int,
        default=None,
    )
    flag("--keep-checkpoint-max", "Checkpoints kept; older ones are deleted.", type=_int)
    flag("--eval-throttle-secs", "Do not evaluate more often than this.", type=_int)
    flag(
        "--export",
        "Export SavedModels: the best by validation accuracy after each evaluation "
        "(JOB_DIR/export/best/<timestamp>) and the last checkpoint (JOB_DIR/export/final/<timestamp>).",
        action=_BoolFlag,
    )

    # -- health -----------------------------------------------------------------------------------
    h = p.add_argument_group(
        "health rules",
        "Checked in the graph every --health-every-n-steps steps and after each evaluation; each is a\n"
        "TensorBoard scalar health/<rule>, a log line and a JOB_DIR/health.json record when it fires.\n"
        "A NaN or infinite loss or gradient always stops training (docs/health.md).",
    )
    h.add_argument(
        "--health-checks",
        choices=HEALTH_ACTIONS,
        default=d.health_checks,
        help="What the rules do when they fire: off (not computed), warn, or stop training (exit status 4).",
    )
    for f in health_thresholds():
        h.add_argument(
            flag_name(f.name),
            type=_int if f.type == "int" else _float,
            metavar="N" if f.type == "int" else "X",
            default=f.default,
            help=f.metadata["help"] or _THRESHOLD_HELP[f.name],
        )

    # -- cluster and devices ------------------------------------------------------------------------
    flag = adder(p.add_argument_group("cluster and devices"))
    flag("--num-gpus", "GPUs to use, one tower each; 0 trains on the CPU.", type=_int)
    flag(
        "--num-cpu-towers",
        "With --num-gpus 0: run N towers on N CPU devices (tests the multi-GPU "
        "logic on machines without GPUs; no speed-up).",
        type=_int,
    )
    flag(
        "--variable-strategy",
        "Where variables live: CPU (a parameter-server layout) or spread over the GPUs.",
        choices=["CPU", "GPU"],
    )
    flag(
        "--data-format",
        "Layout inside the model; default channels_first on GPUs, channels_last on CPUs.",
        choices=DATA_FORMATS,
        default=None,
    )
    flag("--num-intra-threads", "Threads inside one op; 0 lets TensorFlow choose.", type=_int)
    flag("--num-inter-threads", "Ops run in parallel; 0 lets TensorFlow choose.", type=_int)
    flag(
        "--sync",
        "Synchronous distributed training (one update from all workers; a TF_CONFIG cluster only).",
        action=_BoolFlag,
    )
    flag(
        "--ps-wait-secs",
        "In a cluster, how long to wait for the parameter servers to answer before failing.",
        type=_int,
    )
    flag("--log-device-placement", "Log the device of every op (long).", action=_BoolFlag)

    for name, (_, why) in RETIRED.items():
        p.add_argument(flag_name(name), action=_Retired, why=why)
    return p


# Help of the thresholds declared without one (the rule's name says most of it).
_THRESHOLD_HELP = {
    "health_every_n_steps": "Steps between two checks of the rules in the graph.",
    "health_update_ratio_max": "Highest healthy learning rate x |gradient| / |weights| of a layer.",
    "health_input_std_min": "Smallest standard deviation of the input after the network's scaling.",
    "health_input_std_max": "Largest standard deviation of the input after the network's scaling.",
}


def given_flags(argv) -> set:
    """The destinations of the flags ``argv`` gives (``@FILE`` expanded), defaults left out: what was
    fixed by hand (``--network auto`` chooses only among members that agree with it)."""
    parser = build_parser()
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_known_args(argv)[0]))  # a parser that extends the trainer's has more


def flag_names() -> set:
    """Every option string the trainer takes (``--x`` and ``--no-x``): argparse keeps them
    in a private table, read here only."""
    return set(build_parser()._option_string_actions)


def _check_threshold(f, value) -> None:
    low, high = f.metadata["range"]
    name = flag_name(f.name)
    if low == NONNEGATIVE:
        if not 0 <= value < (math.inf if high is None else high):
            raise ValueError("%s %s must be %s." % (name, value, "in [0, %g)" % high if high else "0 or more"))
        return
    if low is not None and high is not None and not low < value < high:
        raise ValueError("%s %s must be in (%g, %g)." % (name, value, low, high))
    if low == 0 and high is None and not value > 0:
        raise ValueError("%s %s must be positive." % (name, value))


def validate(args: argparse.Namespace, cluster: Cluster, gpus_visible: int) -> None:
    """Raises ValueError naming the bad flag value and the fix: each rule between flags, by concern."""
    resnet.check_depth(args.num_layers, args.resnet_version)
    _check_length(args)
    _check_optimisation(args)
    _check_health(args)
    _check_devices(args, cluster, gpus_visible)
    _check_budget(args, cluster)
    _check_network(args)
    _check_augmentation(args)
    _check_data_and_cluster(args, cluster)


def _positive(name: str, value) -> None:
    if value is None or value <= 0:
        raise ValueError("--%s %s must be positive." % (name, value))


def _check_length(args) -> None:
    """How long training runs: steps or epochs, the warm-up, the piecewise decays."""
    if args.train_steps is not None and args.train_epochs is not None:
        raise ValueError(
            "--train-steps %d and --train-epochs %s both set the length of training: "
            "keep one." % (args.train_steps, args.train_epochs)
        )
    if args.train_epochs is not None:
        _positive("train-epochs", args.train_epochs)
    if args.train_steps is not None:
        _positive("train-steps", args.train_steps)
    if args.warmup_epochs is not None and args.warmup_epochs < 0:
        raise ValueError("--warmup-epochs %s must not be negative." % args.warmup_epochs)
    if args.lr_decay_steps is not None:
        if args.lr_schedule != LrSchedule.PIECEWISE:
            raise ValueError(
                "--lr-decay-steps sets the piecewise schedule's decays: drop it or use "
                "--lr-schedule piecewise (not %s)." % args.lr_schedule
            )
        steps = args.lr_decay_steps
        if any(b <= a for a, b in zip(steps, steps[1:])) or steps[0] < 1:
            raise ValueError(
                "--lr-decay-steps %s must be positive and increasing, e.g. 32000 48000." % " ".join(map(str, steps))
            )


def _check_optimisation(args) -> None:
    """The optimizer's and the loss's settings, batch sizes, logging, checkpoints, weight averages."""
    if not 0 <= args.label_smoothing < 1:
        raise ValueError("--label-smoothing %s must be in [0, 1), e.g. 0.1." % args.label_smoothing)
    for name in (
        "train_batch_size",
        "eval_batch_size",
        "learning_rate",
        "batch_norm_epsilon",
        "log_every_n_steps",
        "keep_checkpoint_max",
    ):
        _positive(name.replace("_", "-"), getattr(args, name))
    if args.save_checkpoints_steps is not None:
        _positive("save-checkpoints-steps", args.save_checkpoints_steps)
    if not 0 <= args.momentum < 1:
        raise ValueError("--momentum %s must be in [0, 1)." % args.momentum)
    if args.weight_decay < 0:
        raise ValueError("--weight-decay %s must not be negative." % args.weight_decay)
    if not 0 < args.batch_norm_decay < 1:
        raise ValueError("--batch-norm-decay %s must be in (0, 1), e.g. 0.997." % args.batch_norm_decay)
    if not 0 <= args.ema_decay < 1:
        raise ValueError("--ema-decay %s must be in [0, 1), e.g. 0.999 (0 turns the average off)." % args.ema_decay)


def _check_health(args) -> None:
    """Each health threshold in its range, and the pairs in order."""
    for f in health_thresholds():
        _check_threshold(f, getattr(args, f.name))
    if args.health_update_ratio_min >= args.health_update_ratio_max:
        raise ValueError(
            "--health-update-ratio-min %g must be below --health-update-ratio-max %g."
            % (args.health_update_ratio_min, args.health_update_ratio_max)
        )
    if args.health_input_std_min >= args.health_input_std_max:
        raise ValueError(
            "--health-input-std-min %g must be below --health-input-std-max %g."
            % (args.health_input_std_min, args.health_input_std_max)
        )


def _check_devices(args, cluster: Cluster, gpus_visible: int) -> None:
    """GPUs and CPU towers against what is visible; batches that split evenly; --precision auto on the CPU."""
    for name in ("num_gpus", "num_cpu_towers", "num_intra_threads", "num_inter_threads"):
        if getattr(args, name) < 0:
            raise ValueError("--%s %d must not be negative." % (name.replace("_", "-"), getattr(args, name)))
    if args.num_gpus > 0 and args.num_cpu_towers > 0:
        raise ValueError("--num-cpu-towers %d is for CPU training: use it with --num-gpus 0." % args.num_cpu_towers)
    if args.num_gpus > gpus_visible and cluster.task_type != "ps":
        raise ValueError(
            "--num-gpus %d but %d GPU(s) are visible: pass --num-gpus %d (0 trains on the CPU)."
            % (args.num_gpus, gpus_visible, gpus_visible)
        )
    if args.variable_strategy == VariableStrategy.GPU and args.num_gpus == 0:
        raise ValueError("--variable-strategy GPU needs --num-gpus > 0: use --variable-strategy CPU.")
    towers = len(devices.tower_devices(args.num_gpus, args.num_cpu_towers))
    for name in ("train_batch_size", "eval_batch_size"):
        value = getattr(args, name)
        if value % towers:
            raise ValueError(
                "--%s %d is not divisible by the %d towers: use a multiple of %d, e.g. %d."
                % (name.replace("_", "-"), value, towers, towers, (value // towers + 1) * towers)
            )
    if args.precision == AUTO and args.num_gpus > 0:
        raise ValueError(
            "--precision auto times fp32 against bf16 on the CPU; with --num-gpus %d choose fp32, bf16 or fp16."
            % args.num_gpus
        )


def _check_budget(args, cluster: Cluster) -> None:
    """--time-budget plans the steps and the warm-up itself, with a schedule that ends at 0, in one process."""
    if args.time_budget is None:
        return
    given = [f for f, v in (("--train-steps", args.train_steps), ("--train-epochs", args.train_epochs)) if v]
    if given:
        raise ValueError(
            "--time-budget %gs plans the number of steps itself: drop %s." % (args.time_budget, " and ".join(given))
        )
    if args.lr_schedule not in schedules.BUDGET_SCHEDULES:
        raise ValueError(
            "--time-budget needs a schedule that decays to 0 at the end of the budget: --lr-schedule cosine "
            "or onecycle (not %s)." % args.lr_schedule
        )
    if args.warmup_epochs is not None:
        raise ValueError(
            "--time-budget sets the warm-up as a fraction of the plan (onecycle: its first 20%%): drop "
            "--warmup-epochs %s." % args.warmup_epochs
        )
    if cluster.distributed:
        raise ValueError(
            "--time-budget plans the steps of one process; this is a %s of a TF_CONFIG cluster, whose workers "
            "the chief cannot time: give the cluster --train-steps instead." % cluster.task_type
        )


def _check_network(args) -> None:
    """Each network's own shape flags, and --network auto's need of a budget."""
    resnet.check_width(args.width_multiplier)
    if args.network == Network.AUTO and args.time_budget is None:
        raise ValueError(
            "--network auto chooses the network for --time-budget: give a budget (e.g. --time-budget 5m), or name "
            "the network (--network airbench)."
        )
    if args.network in (Network.AIRBENCH, Network.AUTO):
        defaults = HParams(data_dir="", job_dir="")
        given = [
            "%s %s" % (flag_name(name), getattr(args, name))
            for name in ("num_layers", "resnet_version", "zero_init_residual")
            if getattr(args, name) != getattr(defaults, name)
        ]
        if given:
            raise ValueError(
                "%s shape a ResNet; --network %s has its own fixed layers: drop them or use --network resnet."
                % (" and ".join(given), args.network)
            )
    if args.zero_init_residual and args.resnet_version != ResNetVersion.V1:
        raise ValueError(
            "--zero-init-residual zeroes the last batch norm of v1 residual units; %s units end with a convolution: "
            "drop it or use --resnet-version v1." % args.resnet_version
        )
    if args.network == Network.RESNET and args.group_depth != HParams.group_depth:
        raise ValueError(
            "--group-depth %d shapes the groups of --network airbench; a ResNet's depth is --num-layers: drop it "
            "or use --network airbench." % args.group_depth
        )


def _check_augmentation(args) -> None:
    """Cutout, crop padding and progressive resizing within the image, and only with distortions on."""
    if not 0 <= args.cutout <= fmt.HEIGHT:
        raise ValueError("--cutout %d must be a square side from 0 to %d pixels, e.g. 8." % (args.cutout, fmt.HEIGHT))
    if not 0 <= args.crop_padding <= pipeline.MAX_PAD:
        raise ValueError(
            "--crop-padding %d must be from 0 to %d pixels, e.g. 4 (He et al. 2016) or 2."
            % (args.crop_padding, pipeline.MAX_PAD)
        )
    if args.progressive_resize and not schedules.MIN_RESIZE <= args.progressive_resize < fmt.HEIGHT:
        raise ValueError(
            "--progressive-resize %d must be from %d to %d pixels a side, e.g. 24 (0: off); below %d the "
            "networks' last maps vanish."
            % (args.progressive_resize, schedules.MIN_RESIZE, fmt.HEIGHT - 1, schedules.MIN_RESIZE)
        )
    if not 0 < args.progressive_resize_until <= 1:
        raise ValueError(
            "--progressive-resize-until %s must be a fraction of training in (0, 1], e.g. %g."
            % (args.progressive_resize_until, schedules.RESIZE_UNTIL)
        )
    if not args.progressive_resize and args.progressive_resize_until != schedules.RESIZE_UNTIL:
        raise ValueError(
            "--progressive-resize-until %s says when --progressive-resize reaches 32 pixels, and it is off: give "
            "--progressive-resize SIZE (e.g. 24) or drop it." % args.progressive_resize_until
        )
    if args.cutout and not args.use_distortion_for_training:
        raise ValueError(
            "--cutout %d is a training distortion: drop it or drop --no-use-distortion-for-training." % args.cutout
        )


def _check_data_and_cluster(args, cluster: Cluster) -> None:
    """The training splits, determinism's seed, and --sync's cluster."""
    if fmt.VALIDATION in args.train_subsets and cluster.distributed:
        raise ValueError(
            "--train-subsets train validation trains a final model in one process; a TF_CONFIG cluster evaluates "
            "the validation split as it trains: train on train alone there."
        )
    if fmt.TRAIN not in args.train_subsets:
        raise ValueError(
            "--train-subsets %s must include train (e.g. 'train validation' for a final model)."
            % " ".join(args.train_subsets)
        )
    if args.deterministic and args.seed is None:
        raise ValueError("--deterministic needs --seed N, so that runs can repeat.")
    if args.sync and not cluster.distributed:
        raise ValueError(
            "--sync synchronises workers of a distributed job; "
            "this is a single local process (no TF_CONFIG cluster): drop --sync."
        )
