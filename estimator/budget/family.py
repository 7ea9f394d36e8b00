"""``--network auto``: a family of networks, and the member a time budget buys the most accuracy with.

A fixed network fits a budget only where it was tuned: in 5 minutes an AVX2-only CPU trains airbench94's
network for less than an epoch (61% on an AMD EPYC, where ResNet-14 for 3.8 epochs made 75%), while a CPU
with AMX trains it for 7 (88%). So the recipes name the family, and the trainer takes the member whose
accuracy, at the epochs this machine affords it in this budget, the table below expects to be highest.

Each member is a network with the augmentation it was measured with (airbench94's shifts of 2 pixels,
airbench96's shifts of 4 and a 12-pixel cutout). ``TABLE`` gives each member's test accuracy after E
epochs of the recipes' training settings (onecycle, Lookahead, progressive resizing from 20 pixels,
label smoothing 0.2, on the 50,000 training and validation images of the JPEG stand-in): how it was
made is in docs/experiments.md ("Accuracy against epochs: the family's table"), from
``python -m benchmarks.network_table``. Between measured epochs the accuracy is interpolated linearly in
log(epochs); beyond the last it is held (no gain assumed); below the first a member is not a candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

from estimator.common.options import Network, Optimizer, Precision, flag_name

# The settings a member sets: its shape (given by hand, they narrow the family to the members of that
# shape) and its augmentation (given by hand, they override the member's own).
SHAPE = ("group_depth", "width_multiplier", "group_widths")
AUGMENTATION = ("crop_padding", "cutout")


@dataclass(frozen=True)
class Member:
    """A network of the family: its shape, the augmentation it was measured with, and its forward
    multiply-adds per 32-pixel image (what its speed is estimated from, relative to the one timed)."""

    name: str
    group_depth: int
    width_multiplier: float
    crop_padding: int
    cutout: int
    forward_mflops: float
    # Images/s per multiply-add against the reference member's, measured side by side per precision, since
    # matrix units favour the wide members most (docs/speed.md, "The family's speeds").
    fp32_efficiency: float = 1.0
    bf16_efficiency: float = 1.0
    group_widths: tuple = None  # each group's filters, where they are not airbench94's scaled

    def efficiency(self, precision) -> float:
        """The efficiency in ``precision``: fp16 (GPUs, not measured here) takes bf16's, the other
        precision computed on matrix units."""
        return self.fp32_efficiency if precision == Precision.FP32 else self.bf16_efficiency

    def settings(self) -> dict:
        """The HParams values this member sets: its network, ``SHAPE`` and ``AUGMENTATION``."""
        return {"network": Network.AIRBENCH, **{name: getattr(self, name) for name in SHAPE + AUGMENTATION}}

    def flags(self) -> list:
        """``settings()`` as a command line (a study's trials train the member a recipe chose)."""
        spelled = []
        for name, value in self.settings().items():
            if isinstance(value, tuple):
                spelled += [flag_name(name), *map(str, value)]
            elif value is not None:
                spelled += [flag_name(name), "%g" % value if isinstance(value, float) else str(value)]
        return spelled


# Forward MFLOP per image: TensorFlow's profiler (``registry.forward_flops``; a test checks them).
MEMBERS = (
    Member("airbench94 x0.25", 2, 0.25, 2, 0, 20.7, fp32_efficiency=0.80, bf16_efficiency=0.63),
    # Between the members above and below (each costs about 3x the one before it), so that a budget on a
    # CPU between the fast and the slow ones finds a member that fits it. x0.375's efficiency varies most
    # (docs/speed.md): in bf16 0.62 on the Zen 4 and 5, 0.39 with AMX; in fp32 0.82-1.00.
    Member("airbench94 x0.375", 2, 0.375, 2, 0, 40.7, fp32_efficiency=0.90, bf16_efficiency=0.50),
    Member("airbench94 x0.5", 2, 0.5, 2, 0, 67.4),
    # airbench94's first group at x0.5, the others at x0.75: per second in bf16 the wide later groups learn more than
    # the first group's big maps (docs/experiments.md, "Members of other shapes").
    Member(
        "airbench94 32/192/192",
        2,
        1.0,
        2,
        0,
        116.4,
        fp32_efficiency=1.1,
        bf16_efficiency=1.25,
        group_widths=(32, 192, 192),
    ),
    Member("airbench94 x0.75", 2, 0.75, 2, 0, 140.7, fp32_efficiency=1.12, bf16_efficiency=1.25),
    Member("airbench94", 2, 1.0, 2, 0, 240.7, fp32_efficiency=1.15, bf16_efficiency=1.46),
    Member("airbench96", 3, 1.0, 4, 12, 328.3, fp32_efficiency=1.14, bf16_efficiency=1.45),
)
# -- the table (benchmarks/results/network_table*.json) --
TABLE = {
    "airbench94 x0.25": ((2, 0.6968), (4, 0.7878), (8, 0.8195), (16, 0.8338)),
    "airbench94 x0.375": ((2, 0.7552), (4, 0.8149), (8, 0.849), (16, 0.8621), (32, 0.8709)),
    "airbench94 x0.5": ((1, 0.6478), (2, 0.7734), (4, 0.8301), (8, 0.8565), (16, 0.8737), (32, 0.8886)),
    "airbench94 32/192/192": ((2, 0.791), (4, 0.8397)),
    "airbench94 x0.75": ((2, 0.7944), (4, 0.8461), (8, 0.8737), (16, 0.8923), (32, 0.8966)),
    "airbench94": ((1, 0.7067), (2, 0.8037), (4, 0.8573), (8, 0.8846), (16, 0.9021), (32, 0.904)),
    "airbench96": ((16, 0.8988), (41, 0.9129)),
}
# Muon's, where measured (benchmarks/results/epochs_*muon*.json, the mean of its seeds), at the rate --optimizer
# auto takes for those epochs (hparams.MUON_SHORT_RATE below MUON_SHORT_BELOW_EPOCHS); past its last point SGD's.
MUON_TABLE = {
    "airbench94 x0.25": ((1, 0.6995), (2, 0.7758), (4, 0.8044), (8, 0.8208), (16, 0.8415)),
    "airbench94 x0.375": ((1, 0.7461), (2, 0.8066), (4, 0.833), (8, 0.8531), (16, 0.8615)),
    "airbench94 x0.5": ((1, 0.776), (2, 0.8153), (4, 0.8431), (8, 0.8651), (16, 0.8776)),
    "airbench94 32/192/192": ((1, 0.7845), (2, 0.8308), (4, 0.8539), (8, 0.8781)),
    "airbench94 x0.75": ((1, 0.7947), (2, 0.8359), (4, 0.8574), (8, 0.88), (16, 0.8906)),
    "airbench94": ((1, 0.8098), (2, 0.8482), (4, 0.868), (8, 0.8901)),
}

# The member timed at start-up; the others' speed is estimated from it by their multiply-adds and
# efficiency, and timed only where the estimate leaves the choice open. Small enough to time in a few
# seconds on any CPU, large enough to keep the cores as busy as the others.
REFERENCE = "airbench94 x0.5"
# The reference's speed where nothing could be timed (a budget too short for probes, and an empty cache):
# its fp32 images/s on the slowest CPU measured, an AVX2-only EPYC (training 509, evaluation 3.4x that).
ASSUMED_REFERENCE_SPEED = {"train": 509.0, "eval": 1731.0}
# How a speed was had, as hparams.json records it: timed on this CPU, or assumed.
TIMED = "timed"
ASSUMED = "assumed: the slowest CPU measured (no probe in this budget)"
# How a member's speed estimated from the reference's timing is recorded (``ASSUMED`` added where nothing was timed).
ESTIMATED = "estimated from %s" % REFERENCE
# How far an estimated speed may be from the truth, either way: the efficiencies measured on the CPU kinds
# of docs/speed.md lie within 1.28x of the members' (x0.375 in bf16, 0.39 on a Xeon with AMX).
ESTIMATE_SPREAD = 1.3
# Members timed besides the reference, at most: with six members, neighbours' estimates often overlap, and
# timing two of them took a first run on a simulated AVX2-only EPYC past the 10 s its probes may cost.
TIMED_AT_MOST = 1


def member(name: str) -> Member:
    for m in MEMBERS:
        if m.name == name:
            return m
    raise ValueError("%r is not a member of the family: %s." % (name, ", ".join(m.name for m in MEMBERS)))


def expected_accuracy(name: str, epochs: float, table=None, optimizer=Optimizer.SGD, muon_table=None):
    """The accuracy ``TABLE`` (``MUON_TABLE`` where measured, for ``optimizer`` muon) expects of member ``name`` after
    ``epochs`` epochs, or None below its first measured epochs, or with none (not a candidate there: nothing says
    how it does)."""
    points = dict((table or TABLE).get(name, ()))
    if optimizer == Optimizer.MUON:
        muon = dict((muon_table or MUON_TABLE).get(name, ()))
        points = {e: a for e, a in points.items() if e > max(muon, default=0)} | muon
    points = sorted(points.items())
    if not points or epochs < points[0][0]:
        return None
    measured_epochs, accuracies = zip(*points)
    return float(numpy.interp(math.log(epochs), numpy.log(measured_epochs), accuracies))


def estimated_rate(name: str, reference_images_per_sec: float, precision) -> float:
    """Training images/s of member ``name`` in ``precision`` estimated from ``REFERENCE``'s in it by their
    multiply-adds and efficiencies (within ``ESTIMATE_SPREAD`` of what was timed on every CPU measured)."""
    m, reference = member(name), member(REFERENCE)
    ratio = m.efficiency(precision) / reference.efficiency(precision)
    return reference_images_per_sec * reference.forward_mflops / m.forward_mflops * ratio


def probe_batch(name: str, batch: int) -> int:
    """The batch member ``name``'s speed is timed at when the reference's was timed at ``batch``: halved
    (to 64 at least) until a step's multiply-adds are no more than the reference's, so that timing any
    member costs about what timing the reference did (airbench94's steps of 512 images took 3.3 s each on
    an AVX2-only EPYC). Per image, airbench94 ran within 2% of its speed at 512 at 128 (docs/speed.md)."""
    limit = member(REFERENCE).forward_mflops * batch
    while batch > 64 and member(name).forward_mflops * batch > limit:
        batch //= 2
    return batch


def epochs_in(training_secs: float, rate: float, num_train_examples: int, step_cost: float = 1.0) -> float:
    """Epochs a network of ``rate`` training images/s trains in ``training_secs`` at ``step_cost`` per step."""
    return training_secs * rate / step_cost / max(1, num_train_examples)


def _expected(name: str, epochs: float, table=None, optimizer_for=None, muon_table=None) -> tuple:
    """``(accuracy expected, optimizer)`` of member ``name`` after ``epochs`` epochs, as ``choose`` takes the rest."""
    optimizer = optimizer_for(epochs) if optimizer_for else Optimizer.SGD
    return expected_accuracy(name, epochs, table, optimizer, muon_table), optimizer


def worth_timing(rates, num_train_examples, training_secs, step_cost=1.0, **tables) -> list:
    """The members whose speed is estimated (``rates``, as ``choose`` takes them) and that could still be
    the most accurate, or lose that place, if their speed were anywhere within ``ESTIMATE_SPREAD`` of the
    estimate: the ones worth timing, at most ``TIMED_AT_MOST``, those that could do best first. A member
    that wins or loses at either end of its range is left estimated: timing it would cost the budget
    seconds (36 s for airbench94 on an AVX2-only EPYC) and change nothing."""

    def accuracy(rate):
        epochs = epochs_in(training_secs(rate), rate, num_train_examples, step_cost)
        value = _expected(name, epochs, **tables)[0]
        return -1.0 if value is None else value

    bounds = {}
    for name, (rate, how) in rates.items():
        spread = 1.0 if how == TIMED else ESTIMATE_SPREAD
        bounds[name] = (accuracy(rate / spread), accuracy(rate * spread))
    uncertain = []
    for name, (low, high) in bounds.items():
        best_other = max((lo for other, (lo, _) in bounds.items() if other != name), default=-1.0)
        top_other = max((hi for other, (_, hi) in bounds.items() if other != name), default=-1.0)
        if low != high and high >= 0 and high >= best_other and low <= top_other:
            uncertain.append(name)
    return sorted(uncertain, key=lambda name: -bounds[name][1])[:TIMED_AT_MOST]


def choose(budget_secs, rates, num_train_examples, training_secs, step_cost=1.0, **tables):
    """The member expected to be most accurate in ``budget_secs``, and the figures behind the choice.

    Args:
      budget_secs: the whole command's budget.
      rates: ``{member name: (training images/s in the job's precision, how it was had: "timed" or
        "estimated")}`` for the candidates (flags given by hand leave some out).
      num_train_examples: images in an epoch.
      training_secs: ``images/s -> seconds`` of the budget left to train a member that fast
        (``planner.training_secs``: the start-up and the end's reserve at that speed left out).
      step_cost: the mean cost of a training step relative to a full-size one (``--progressive-resize``).
      tables: ``table`` (SGD's, ``TABLE``), ``optimizer_for`` (``epochs -> the optimizer`` a member would train with
        in that many; none: SGD) and ``muon_table`` (``MUON_TABLE``): what each member is expected by.

    Returns:
      ``(member, record)``: ``record`` (hparams.json's ``network_choice``) lists every candidate with
      its images/s, the epochs it affords and the accuracy the table expects, and why the choice.
    """
    candidates = []
    for m in MEMBERS:
        if m.name not in rates:
            continue
        rate, how = rates[m.name]
        train_secs = training_secs(rate)
        epochs = epochs_in(train_secs, rate, num_train_examples, step_cost)
        expected, optimizer = _expected(m.name, epochs, **tables)
        candidates.append(
            {
                "member": m.name,
                "images_per_sec": round(rate, 1),
                "speed": how,
                "training_secs": round(train_secs, 1),
                "epochs": round(epochs, 2),
                "expected_accuracy": None if expected is None else round(expected, 4),
                "optimizer": str(optimizer),
            }
        )
    if not candidates:
        raise ValueError("no member of the family fits the flags given by hand: name the network instead.")
    scored = [c for c in candidates if c["expected_accuracy"] is not None]
    if scored:
        best = max(scored, key=lambda c: c["expected_accuracy"])
        why = "the most accurate the table expects for the epochs each affords"
    else:  # a budget below every member's first measured epochs: the fastest, which trains most of one
        best = max(candidates, key=lambda c: c["images_per_sec"])
        why = "no member reaches its first measured epochs in this budget: the fastest"
    record = {
        "family": "airbench",
        "member": best["member"],
        "why": why,
        "budget_secs": budget_secs,
        "training_secs_estimated": best["training_secs"],
        "candidates": candidates,
    }
    return member(best["member"]), record
