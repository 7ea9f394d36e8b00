"""The choices the trainer's flags name, as types.

Each is a ``str`` enum whose values are the flags' spellings, which hparams.json records: a member
compares equal to its string and prints as it, so job dirs written before, recipes and tuning
configs keep working. Code that acts on a choice compares with the members, never with a literal.
"""

from __future__ import annotations

import dataclasses
import enum


class Choice(str, enum.Enum):
    """A flag's choice: equal to its spelling, and printed as it."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def values(cls) -> tuple:
        """The spellings, in declaration order (argparse's ``choices``)."""
        return tuple(member.value for member in cls)


class Precision(Choice):
    """--precision: the network's compute dtype (variables stay float32); auto: timed on this CPU."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    AUTO = "auto"


class Network(Choice):
    """--network: He et al.'s ResNets, airbench's network, or (auto) the member of airbench's family a
    time budget buys the most accuracy with (``estimator.networks.family``)."""

    RESNET = "resnet"
    AIRBENCH = "airbench"
    AUTO = "auto"


class ResNetVersion(Choice):
    """--resnet-version: post-activation, pre-activation, pre-activation bottleneck units."""

    V1 = "v1"
    V2 = "v2"
    BOTTLENECK_V2 = "bottleneck_v2"


class EvalPolicy(Choice):
    """--eval-policy: validate after each checkpoint, or train without stopping and evaluate once."""

    PERIODIC = "periodic"
    FINAL = "final"


class HealthAction(Choice):
    """--health-checks: what the health rules do when they fire."""

    OFF = "off"
    WARN = "warn"
    STOP = "stop"


class LrSchedule(Choice):
    """--lr-schedule: the learning rate's shape over training."""

    PIECEWISE = "piecewise"
    COSINE = "cosine"
    ONECYCLE = "onecycle"


class Optimizer(Choice):
    """--optimizer: SGD with momentum for every variable, Muon for the convolution filters, or (auto, with
    --time-budget) Muon where the budget affords few epochs."""

    SGD = "sgd"
    MUON = "muon"
    AUTO = "auto"


class LrScaling(Choice):
    """--lr-scaling: the peak rate as given, or scaled with the global batch (Goyal et al. 2017)."""

    NONE = "none"
    LINEAR = "linear"


class DataFormat(Choice):
    """--data-format: the tensors' layout inside the model."""

    CHANNELS_FIRST = "channels_first"
    CHANNELS_LAST = "channels_last"


class VariableStrategy(Choice):
    """--variable-strategy: where variables live."""

    CPU = "CPU"
    GPU = "GPU"


def flag_name(dest: str) -> str:
    """A setting's flag: ``width_multiplier`` -> ``--width-multiplier``."""
    return "--" + dest.replace("_", "-")


def check_depth(num_layers: int, version: str = ResNetVersion.V1) -> int:
    """A ResNet's residual units per stage, n of its 6n+2 (9n+2) layers, or raises ValueError naming the depth.
    Here rather than with the network, so that the flags are checked before TensorFlow loads."""
    if version not in ResNetVersion.values():
        raise ValueError("ResNet version %r is not one of %s." % (version, ", ".join(ResNetVersion.values())))
    per_unit = 9 if version == ResNetVersion.BOTTLENECK_V2 else 6
    if num_layers < per_unit + 2 or (num_layers - 2) % per_unit:
        examples = "29, 47, 164" if per_unit == 9 else "20, 32, 44, 56, 110"
        raise ValueError(
            "num_layers=%d is not %dn+2 for a %s ResNet: use one of %s ..." % (num_layers, per_unit, version, examples)
        )
    return (num_layers - 2) // per_unit


# --group-depth: the airbench network's 3x3 convolutions per group: airbench94's 2, or airbench96's 3
# (the last two inside a residual connection).
GROUP_DEPTHS = (2, 3)


def network_shape(hp) -> tuple:
    """The names of the settings of ``hp`` (an ``HParams``) that shape the network's variables: those declared
    with ``shapes=True`` (``training.settings.Setting``), read from the dataclass's own field metadata."""
    return tuple(f.name for f in dataclasses.fields(hp) if getattr(f.metadata.get("setting"), "shapes", False))
