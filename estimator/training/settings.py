"""How a setting is declared: one ``HParams`` field with its flag's group, help, and range or choices
beside it (``setting``).

Everything else is read from those declarations: the trainer's parser and its ``--help``
(``flags.build_parser``), the checks of one value on its own (``Range.check``), and the flag table of
docs/training.md (``flags.markdown_table``, held to the file by a test). Rules between settings stay as
code in ``flags``, each named for what it checks.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field

from estimator.common.options import flag_name  # noqa: F401 (the flags' spelling, for the settings' users)


@dataclass(frozen=True)
class Group:
    """A heading of ``--help`` and of the docs' flag table."""

    key: str
    title: str
    description: str = None
    hidden: bool = False  # its flags are taken but kept out of --help and the flag table


# In the order --help shows them.
GROUPS = (
    Group("job", "job, data and logs"),
    Group("network", "network"),
    Group("optimisation", "optimisation and schedule"),
    Group("budget", "time budget and precision"),
    Group("augmentation", "augmentation"),
    Group("evaluation", "evaluation, checkpoints and export"),
    Group(
        "health",
        "health rules",
        "Checked in the graph every --health-every-n-steps steps and after each evaluation; each is a\n"
        "TensorBoard scalar health/<rule>, a log line and a JOB_DIR/health.json record when it fires.\n"
        "A NaN or infinite loss or gradient always stops training (docs/health.md).",
    ),
    # What only tests use: taken as before, out of --help.
    Group("cluster", "cluster and devices"),
    Group("testing", "testing the towers on CPU devices", hidden=True),
)
HIDDEN_GROUPS = tuple(g.key for g in GROUPS if g.hidden)
GROUP_KEYS = tuple(g.key for g in GROUPS)


@dataclass(frozen=True)
class Range:
    """The values one setting takes on its own: bounds (open or closed; None: unbounded), an optional
    step (``step=0.125``: 8 x the value a whole number), and the words of its one-line refusal."""

    low: float = None
    high: float = None
    low_open: bool = False
    high_open: bool = False
    step: float = None
    unit: str = ""  # "pixels": said after integer bounds ("from 0 to 32 pixels")
    what: str = ""  # said before the bounds ("a square side from 0 to 32 pixels")
    example: str = ""  # said after them ("e.g. 8")

    def contains(self, value) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return self.step is None or math.isclose(value / self.step, round(value / self.step), abs_tol=1e-9)

    def describe(self) -> str:
        """The values in words: "positive", "0 or more", "in [0, 1)", "from 0 to 32 pixels"."""
        if self.high is None and self.low == 0:
            words = "positive" if self.low_open else "0 or more"
        elif self.high is None:
            words = "above %g" % self.low if self.low_open else "%g or more" % self.low
        elif self.unit and not (self.low_open or self.high_open):
            words = "from %g to %g %s" % (self.low, self.high, self.unit)
        else:
            words = "in %s%g, %g%s" % ("(["[not self.low_open], self.low, self.high, ")]"[not self.high_open])
        if self.step is not None:
            words += " with %g x it a whole number" % (1 / self.step)
        return "%s %s" % (self.what, words) if self.what else words

    def check(self, flag: str, value) -> None:
        """Raises ValueError naming the flag, the value and the values it takes."""
        if value is not None and not self.contains(value):
            example = ", e.g. %s" % self.example if self.example else ""
            raise ValueError("%s %s must be %s%s." % (flag, value, self.describe(), example))


POSITIVE = Range(0, low_open=True)
NONNEGATIVE = Range(0)


class _FieldDefault:
    """``Setting.flag_default`` when the parser's default is the field's."""

    def __repr__(self) -> str:
        return "the field's default"


FIELD_DEFAULT = _FieldDefault()


@dataclass(frozen=True)
class Setting:
    """What a field declares about its flag (``setting``)."""

    group: str
    help: str
    range: Range = None
    choices: tuple = None  # default: the enum's values, for a field typed with one
    item: type = None  # a list flag's element type (nargs="+")
    parse: object = None  # a parser for the text other than the field's type (e.g. durations)
    metavar: str = None
    flag_default: object = FIELD_DEFAULT  # the parser's default where it differs from the field's
    default_text: str = None  # the default in words, where the field's default is not what a run gets
    required: bool = False
    shapes: bool = False  # the network's variables depend on it: a job dir, the probes' cache key follow it


def setting(default, group: str, help: str, **declared):
    """An ``HParams`` field that is a flag: its default, ``GROUPS`` key and help, and ``Setting``'s
    other words (``range=``, ``choices=``, ...)."""
    if group not in GROUP_KEYS:
        raise ValueError("setting group %r is not one of %s" % (group, ", ".join(GROUP_KEYS)))
    return field(default=default, metadata={"setting": Setting(group, help, **declared)})


def of(f: dataclasses.Field) -> Setting:
    """The field's ``Setting``, or None where the field is no flag (resolved from the environment or
    measured)."""
    return f.metadata.get("setting")


def declared(cls) -> list:
    """``[(field, Setting, type)]`` of the dataclass ``cls``'s flags, in declaration order; the type is the
    annotation's (``int``, ``bool``, an enum ...), for a list flag its element's."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        declared = of(f)
        if declared is not None:
            out.append((f, declared, declared.item or hints[f.name]))
    return out
