"""The trainer's flags: ``build_parser()`` (the original tutorial's names and defaults, plus our own,
in groups by concern) and ``validate()``, which checks them at the boundary, naming the bad value and
the fix. ``estimator.training.config`` turns the parsed flags and the environment into ``HParams``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys

from estimator.common import cluster as cluster_lib
from estimator.common.cluster import Cluster
from estimator.common.options import Choice, LrSchedule, Network, Optimizer, Precision, VariableStrategy, check_depth
from estimator.data import records as fmt
from estimator.training import devices, recipes, schedules, settings
from estimator.training.hparams import RETIRED, HParams
from estimator.training.settings import flag_name


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


class _BoolFlag(argparse.BooleanOptionalAction):
    """argparse's ``--x`` and ``--no-x``, and ``--x=false``: the original parsed these with ``type=bool``, so
    ``--flag False`` was True; here an explicit value is parsed strictly, so old command lines mean what they say."""

    def __init__(self, option_strings, dest, default=None, help=None):
        super().__init__(option_strings, dest, default=default)  # no help yet: argparse would add the default
        self.nargs, self.help, self.metavar = "?", help, "BOOL"

    def __call__(self, parser, namespace, values, option_string=None):
        if values is not None and option_string.startswith("--no-"):
            parser.error("%s takes no value" % option_string)
        try:
            setattr(namespace, self.dest, not option_string.startswith("--no-") if values is None else _bool(values))
        except argparse.ArgumentTypeError as e:
            parser.error("%s: %s" % (option_string, e))


class RetiredFlag(argparse.Action):
    """A retired flag (``retired``: an ``hparams.Retired``): refused with one line saying so, hidden from ``--help``."""

    def __init__(self, option_strings, dest, retired, **kwargs):
        self.retired = retired
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, default=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(
            "%s was retired in %s (%s; %s): drop it."
            % (option_string, self.retired.version, self.retired.why, self.retired.docs)
        )


def default_words(value) -> str:
    """A default as ``--help`` and the docs' table say it: on/off, a list spaced, None as nothing."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


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
    """The trainer's parser: a flag for each setting ``HParams`` declares, in its group, and a one-line
    refusal for each retired one."""
    p = _FlagFileParser(
        prog="python -m estimator.cifar10_main",
        usage="%(prog)s [--recipe NAME] --data-dir DIR --job-dir DIR [flags]",
        description=DESCRIPTION,
        epilog="More: docs/training.md (every flag, time budgets, what a job writes), docs/health.md.",
        fromfile_prefix_chars="@",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = {g.key: p.add_argument_group(g.title, g.description) for g in settings.GROUPS}
    for f, declared, kind in settings.declared(HParams):
        groups[declared.group].add_argument(flag_name(f.name), **_argument(f, declared, kind))
    for name, retired in RETIRED.items():
        p.add_argument(flag_name(name), action=RetiredFlag, retired=retired)
    return p


def _default(f, declared):
    """What the parser gives when the flag is absent."""
    return f.default if declared.flag_default is settings.FIELD_DEFAULT else declared.flag_default


def _choices(declared, kind):
    if declared.choices is not None:
        return tuple(declared.choices)
    return kind.values() if issubclass(kind, Choice) else None


def _argument(f, declared, kind) -> dict:
    """argparse's words for one declared setting."""
    words = {"default": _default(f, declared), "help": _help(f, declared).replace("%", "%%")}
    if declared.group in settings.HIDDEN_GROUPS:
        words["help"] = argparse.SUPPRESS
    if declared.required:
        words["required"] = True
    if kind is bool:
        return dict(words, action=_BoolFlag)
    parse = declared.parse or {int: _int, float: _float}.get(kind, str)
    words["type"] = parse
    if declared.item is not None:
        words["nargs"] = "+"
    choices = _choices(declared, kind)
    if choices is not None:
        words["choices"] = list(choices)
    if declared.metavar or choices is None:
        words["metavar"] = declared.metavar or {_int: "N", _float: "X"}.get(parse, "DIR")
    return words


def _default_shown(f, declared) -> str:
    """The default a run gets, in words ("" for a required flag)."""
    if declared.default_text:
        return declared.default_text
    return "" if f.default is dataclasses.MISSING else default_words(f.default)


def _help(f, declared) -> str:
    """The help, then the values the setting takes on its own and its default, once."""
    notes = [declared.range.describe()] if declared.range else []
    default = _default_shown(f, declared)
    if default:
        notes.append("default: " + default)
    return "%s (%s)" % (declared.help, "; ".join(notes)) if notes else declared.help


TABLE_START, TABLE_END = "<!-- flags: generated by make docs -->", "<!-- end of flags -->"


def with_table(text: str) -> str:
    """``text`` (docs/training.md) with ``markdown_table()`` between its two markers."""
    head, start, rest = text.partition(TABLE_START)
    _, end, tail = rest.partition(TABLE_END)
    if not (start and end):
        raise ValueError("the flag table's markers %s ... %s are missing" % (TABLE_START, TABLE_END))
    return head + start + "\n" + markdown_table() + end + tail


def write_table(path: str) -> None:
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(with_table(text))


def markdown_table() -> str:
    """docs/training.md's table of every flag, by group, from the declarations (a test holds the file
    to it; ``make docs`` writes it)."""
    rows = ["| flag | default | what it does |", "|---|---|---|"]
    declared_flags = settings.declared(HParams)
    for group in (g for g in settings.GROUPS if not g.hidden):
        rows.append("| **%s** | | |" % group.title)
        for f, declared, kind in declared_flags:
            if declared.group == group.key:
                text = declared.help + (" Values: %s." % declared.range.describe() if declared.range else "")
                default = _default_shown(f, declared) or ("required" if declared.required else "")
                rows.append("| `%s` | %s | %s |" % (_usage(f, declared, kind), default, text.replace("|", "\\|")))
    return "\n".join(rows) + "\n"


def _usage(f, declared, kind) -> str:
    """A flag as the docs' table spells it: ``--momentum X``, ``--precision fp32\\|bf16...``, ``--nesterov``."""
    if kind is bool:
        return flag_name(f.name)
    choices = _choices(declared, kind)
    value = "\\|".join(map(str, choices)) if choices else _argument(f, declared, kind)["metavar"]
    return "%s %s%s" % (flag_name(f.name), value, " ..." if declared.item is not None else "")


def read_flag_files(argv) -> list:
    """``argv`` with each ``@FILE`` replaced by its flags, read as the trainer reads them (a missing file exits 2
    with the trainer's line)."""
    return build_parser()._read_args_from_files(list(argv))


def given_values(argv) -> dict:
    """``{destination: value}`` of the flags ``argv`` gives, as the trainer's own parser reads them (``@FILE``
    expanded, defaults left out, nothing required): what a tool that reads the trainer's argv looks up. A flag the
    parser refuses exits, as the trainer would (``SystemExit``)."""
    parser = build_parser()
    for action in parser._actions:
        action.default, action.required = argparse.SUPPRESS, False
    return vars(parser.parse_known_args(argv)[0])  # a parser that extends the trainer's has more


def given_flags(argv) -> set:
    """The destinations of the flags ``argv`` gives: what was fixed by hand (``--network auto`` chooses only among
    members that agree with it)."""
    return set(given_values(argv))


def flag_names() -> set:
    """Every option string the trainer takes (``--x`` and ``--no-x``): argparse keeps them
    in a private table, read here only."""
    return set(build_parser()._option_string_actions)


def check_command_line(argv=None, environ=None) -> None:
    """The trainer's flags parsed and checked before TensorFlow loads (all but the GPUs it sees): a bad one
    ends the process at once with its one line and status 2, as ``config.parse`` would seconds later."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        validate(args, cluster_lib.from_environment(environ), gpus_visible=None)
    except ValueError as e:
        parser.error(str(e))


def validate(args: argparse.Namespace, cluster: Cluster, gpus_visible=None) -> None:
    """Raises ValueError naming the bad flag value and the fix: each value in its declared range, then
    each rule between flags, by concern. ``gpus_visible`` None: the GPUs are not checked."""
    for f, declared, _ in settings.declared(HParams):
        if declared.range is not None:
            declared.range.check(flag_name(f.name), getattr(args, f.name))
    _check_length(args)
    _check_devices(args, cluster, gpus_visible)
    _check_budget(args, cluster)
    _check_network(args)
    _check_augmentation(args)
    _check_data_and_cluster(args, cluster)
    if args.network == Network.RESNET:  # last: the one rule the networks own
        check_depth(args.num_layers, args.resnet_version)


def _check_length(args) -> None:
    """How long training runs: steps or epochs, the warm-up, the piecewise decays."""
    if args.train_steps is not None and args.train_epochs is not None:
        given = "--train-steps %d and --train-epochs %s" % (args.train_steps, args.train_epochs)
        raise ValueError("%s both set the length of training: keep one." % given)
    if args.lr_decay_steps is not None:
        if args.lr_schedule != LrSchedule.PIECEWISE:
            raise ValueError(
                "--lr-decay-steps sets the piecewise schedule's decays: drop it (--lr-schedule %s)." % args.lr_schedule
            )
        steps = args.lr_decay_steps
        if any(b <= a for a, b in zip(steps, steps[1:])) or steps[0] < 1:
            raise ValueError("--lr-decay-steps %s must be positive and increasing, e.g. 32000 48000." % _words(steps))


def _words(values) -> str:
    return " ".join(map(str, values))


def _check_devices(args, cluster: Cluster, gpus_visible) -> None:
    """GPUs and CPU towers against what is visible; batches that split evenly; --precision auto on the CPU."""
    if args.num_gpus > 0 and args.num_cpu_towers > 0:
        raise ValueError("--num-cpu-towers %d is for CPU training: use it with --num-gpus 0." % args.num_cpu_towers)
    if gpus_visible is not None and args.num_gpus > gpus_visible and cluster.task_type != "ps":
        raise ValueError(
            "--num-gpus %d but %d GPU(s) are visible: pass --num-gpus %d." % (args.num_gpus, gpus_visible, gpus_visible)
        )
    if args.variable_strategy == VariableStrategy.GPU and args.num_gpus == 0:
        raise ValueError("--variable-strategy GPU needs --num-gpus > 0: use --variable-strategy CPU.")
    towers = len(devices.tower_devices(args.num_gpus, args.num_cpu_towers))
    for name in ("train_batch_size", "eval_batch_size"):
        value = getattr(args, name)
        if value % towers:
            raise ValueError(
                "%s %d is not divisible by the %d towers: use a multiple of %d."
                % (flag_name(name), value, towers, towers)
            )
    if args.precision == Precision.AUTO and args.num_gpus > 0:
        raise ValueError(
            "--precision auto is for the CPU: with --num-gpus %d choose fp32, bf16 or fp16." % args.num_gpus
        )


def _check_budget(args, cluster: Cluster) -> None:
    """--time-budget plans the steps and the warm-up itself, with a schedule that ends at 0, in one process."""
    if args.time_budget is None:
        if args.optimizer == Optimizer.AUTO:
            raise ValueError(
                "--optimizer auto chooses by the epochs a --time-budget affords: give a budget, or sgd or muon."
            )
        return
    given = [f for f, v in (("--train-steps", args.train_steps), ("--train-epochs", args.train_epochs)) if v]
    if given:
        raise ValueError("--time-budget plans the number of steps itself: drop %s." % " and ".join(given))
    if args.lr_schedule not in schedules.BUDGET_SCHEDULES:
        raise ValueError(
            "--time-budget needs --lr-schedule cosine or onecycle (not %s), which end at 0." % args.lr_schedule
        )
    if args.warmup_epochs is not None:
        raise ValueError("--time-budget plans the warm-up itself: drop --warmup-epochs %s." % args.warmup_epochs)
    if cluster.distributed:
        raise ValueError(
            "--time-budget plans one process, not a TF_CONFIG cluster's %s: give --train-steps." % cluster.task_type
        )


def _check_network(args) -> None:
    """Each network's own shape flags, and --network auto's need of a budget."""
    if args.network == Network.AUTO and args.time_budget is None:
        raise ValueError("--network auto chooses the network for --time-budget: give a budget, or --network airbench.")
    if args.network in (Network.AIRBENCH, Network.AUTO):
        defaults = HParams(data_dir="", job_dir="")
        names = [n for n in ("num_layers", "resnet_version") if getattr(args, n) != getattr(defaults, n)]
        if names:
            given = " and ".join("%s %s" % (flag_name(n), getattr(args, n)) for n in names)
            raise ValueError(
                "%s shape a ResNet; --network %s has its own fixed layers: drop them." % (given, args.network)
            )
    if args.group_widths is not None:
        if args.network == Network.RESNET:
            raise ValueError("--group-widths shapes --network airbench's groups: drop it or use --network airbench.")
        if len(args.group_widths) != 3 or min(args.group_widths) < 1:
            raise ValueError(
                "--group-widths %s: give the filters of airbench's 3 groups, each at least 1, e.g. 32 192 192."
                % _words(args.group_widths)
            )
        if args.width_multiplier != HParams.width_multiplier:
            raise ValueError(
                "--group-widths and --width-multiplier %g both set the widths: keep one." % args.width_multiplier
            )
    if args.network == Network.RESNET and args.group_depth != HParams.group_depth:
        raise ValueError(
            "--group-depth %d shapes the groups of --network airbench; a ResNet's is --num-layers." % args.group_depth
        )


def _check_augmentation(args) -> None:
    """Progressive resizing's sizes, and its schedule, cutout and the test views' fraction only where they act."""
    low, high = schedules.MIN_RESIZE, fmt.HEIGHT - 1
    if args.progressive_resize and not low <= args.progressive_resize <= high:
        raise ValueError(
            "--progressive-resize %d must be from %d to %d pixels a side, e.g. 24 (0: off)."
            % (args.progressive_resize, low, high)
        )
    if not args.progressive_resize and args.progressive_resize_until != schedules.RESIZE_UNTIL:
        raise ValueError(
            "--progressive-resize-until %s needs --progressive-resize SIZE: give one or drop it."
            % args.progressive_resize_until
        )
    if args.tta_fraction != HParams.tta_fraction and not (args.eval_flip_tta or args.eval_tta):
        raise ValueError(
            "--tta-fraction %s needs --eval-flip-tta or --eval-tta: add one or drop it." % args.tta_fraction
        )
    if args.cutout and not args.use_distortion_for_training:
        raise ValueError(
            "--cutout %d is a training distortion: drop it or --no-use-distortion-for-training." % args.cutout
        )


def _check_data_and_cluster(args, cluster: Cluster) -> None:
    """The training splits, determinism's seed, and --sync's cluster."""
    if fmt.VALIDATION in args.train_subsets and cluster.distributed:
        raise ValueError("--train-subsets train validation is for one process: a TF_CONFIG cluster trains on train.")
    if fmt.TRAIN not in args.train_subsets:
        raise ValueError("--train-subsets %s must include train." % _words(args.train_subsets))
    if args.deterministic and args.seed is None:
        raise ValueError("--deterministic needs --seed N, so that runs can repeat.")
    if args.sync and not cluster.distributed:
        raise ValueError("--sync synchronises workers of a distributed job, and this is one process: drop --sync.")
