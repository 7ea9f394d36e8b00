"""AI Platform Training's job YAML (``trainingInput``), read and checked as the service did.

``load(path)`` returns the ``trainingInput`` mapping; ``study_spec(training_input,
trainer_flags)`` checks its ``hyperparameters`` and returns a ``StudySpec``. Every
field is either honoured or refused with its name: a study that silently ignored
a setting would answer another question than the one asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import yaml

from estimator.common.options import Choice


class Goal(Choice):
    """hyperparameters.goal."""

    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"


class Algorithm(Choice):
    """hyperparameters.algorithm (unspecified: Optuna's TPE, as the service's Bayesian search)."""

    ALGORITHM_UNSPECIFIED = "ALGORITHM_UNSPECIFIED"
    GRID_SEARCH = "GRID_SEARCH"
    RANDOM_SEARCH = "RANDOM_SEARCH"


class ParamType(Choice):
    """params[].type."""

    DOUBLE = "DOUBLE"
    INTEGER = "INTEGER"
    DISCRETE = "DISCRETE"
    CATEGORICAL = "CATEGORICAL"


class Scale(Choice):
    """params[].scaleType (NONE: linear)."""

    NONE = "NONE"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


# The spellings (what the YAML holds, and Param and StudySpec keep: plain strings, which YAML and JSON write).
GOALS, ALGORITHMS, TYPES, SCALES = Goal.values(), Algorithm.values(), ParamType.values(), Scale.values()
LOG_SCALES = (Scale.UNIT_LOG_SCALE, Scale.UNIT_REVERSE_LOG_SCALE)
HYPERPARAMETER_FIELDS = (
    "goal",
    "hyperparameterMetricTag",
    "maxTrials",
    "maxParallelTrials",
    "maxFailedTrials",
    "enableTrialEarlyStopping",
    "resumePreviousJobId",
    "algorithm",
    "params",
)
PARAM_FIELDS = ("parameterName", "type", "minValue", "maxValue", "discreteValues", "categoricalValues", "scaleType")
# The metrics the trainer reports through cloudml-hypertune (estimator.training.hooks.EvalReporter).
REPORTED_METRICS = ("accuracy",)


class SpecError(ValueError):
    """The YAML asks for something the study cannot honour; the message names the field."""


@dataclass(frozen=True)
class Param:
    name: str  # the trainer flag without "--", e.g. learning-rate
    type: str
    min_value: float = None
    max_value: float = None
    values: tuple = ()  # DISCRETE numbers or CATEGORICAL strings
    scale: str = Scale.UNIT_LINEAR_SCALE.value

    @property
    def log(self) -> bool:
        return self.scale in LOG_SCALES


@dataclass(frozen=True)
class StudySpec:
    goal: str
    metric: str
    max_trials: int
    max_parallel_trials: int
    max_failed_trials: int
    max_failed_trials_given: bool
    early_stopping: bool
    resume_previous_job_id: str
    algorithm: str
    params: tuple = field(default_factory=tuple)


def load(path: str) -> dict:
    """The ``trainingInput`` mapping of a job YAML file."""
    try:
        with open(path) as f:
            document = yaml.safe_load(f)
    except OSError as e:
        raise SpecError("cannot read %s: %s" % (path, e)) from None
    except yaml.YAMLError as e:
        raise SpecError("%s is not valid YAML: %s" % (path, e)) from None
    if not isinstance(document, dict) or not isinstance(document.get("trainingInput"), dict):
        raise SpecError("%s: expected a top-level trainingInput mapping, as in hptuning_config.yaml." % path)
    return document["trainingInput"]


def default_max_failed_trials(max_trials: int) -> int:
    """maxFailedTrials 0 means "the service decides"; here: a quarter of maxTrials, at least 1."""
    return max(1, int(math.ceil(max_trials / 4.0)))


def _number(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError("%s: %r is not a number." % (where, value))
    return value


def _param(entry, index, trainer_flags) -> Param:
    where = "trainingInput.hyperparameters.params[%d]" % index
    if not isinstance(entry, dict):
        raise SpecError("%s: expected a mapping with parameterName and type." % where)
    unknown = sorted(set(entry) - set(PARAM_FIELDS))
    if unknown:
        raise SpecError("%s: unknown field %s (known: %s)." % (where, unknown[0], ", ".join(PARAM_FIELDS)))
    name = entry.get("parameterName")
    if not isinstance(name, str) or not name:
        raise SpecError("%s.parameterName is missing." % where)
    where = "%s (%s)" % (where, name)
    if trainer_flags is not None and "--" + name not in trainer_flags:
        raise SpecError(
            "%s.parameterName: the trainer has no flag --%s (python -m estimator.cifar10_main --help)." % (where, name)
        )
    kind = entry.get("type")
    if kind not in TYPES:
        raise SpecError("%s.type %r is not one of %s." % (where, kind, ", ".join(TYPES)))
    scale = entry.get("scaleType", Scale.UNIT_LINEAR_SCALE.value)
    if scale not in SCALES:
        raise SpecError("%s.scaleType %r is not one of %s." % (where, scale, ", ".join(SCALES)))
    if scale == Scale.NONE:
        scale = Scale.UNIT_LINEAR_SCALE.value
    if kind in (ParamType.DOUBLE, ParamType.INTEGER):
        return _ranged_param(entry, where, name, kind, scale)
    return _listed_param(entry, where, name, kind, scale)


def _ranged_param(entry: dict, where: str, name: str, kind: str, scale: str) -> Param:
    """A DOUBLE or INTEGER parameter: minValue to maxValue, on a scale."""
    for key in ("discreteValues", "categoricalValues"):
        if key in entry:
            raise SpecError("%s.%s does not go with type %s: use minValue and maxValue." % (where, key, kind))
    if "minValue" not in entry or "maxValue" not in entry:
        raise SpecError("%s: type %s needs minValue and maxValue." % (where, kind))
    lo, hi = _number(entry["minValue"], where + ".minValue"), _number(entry["maxValue"], where + ".maxValue")
    if kind == ParamType.INTEGER and not (float(lo).is_integer() and float(hi).is_integer()):
        raise SpecError("%s: INTEGER bounds %r..%r must be whole numbers." % (where, lo, hi))
    if lo > hi:
        raise SpecError("%s: minValue %r is above maxValue %r." % (where, lo, hi))
    if scale != Scale.UNIT_LINEAR_SCALE and lo <= 0:
        raise SpecError("%s: scaleType %s needs a positive range, got minValue %r." % (where, scale, lo))
    if kind == ParamType.INTEGER:
        lo, hi = int(lo), int(hi)
    return Param(name, kind, lo, hi, scale=scale)


def _listed_param(entry: dict, where: str, name: str, kind: str, scale: str) -> Param:
    """A DISCRETE (increasing numbers) or CATEGORICAL (distinct strings) parameter: no range, no scale."""
    if scale != Scale.UNIT_LINEAR_SCALE:
        raise SpecError("%s.scaleType %s: only DOUBLE and INTEGER parameters take a scale: remove it." % (where, scale))
    for key in ("minValue", "maxValue"):
        if key in entry:
            raise SpecError("%s.%s does not go with type %s." % (where, key, kind))
    if kind == ParamType.DISCRETE:
        values = entry.get("discreteValues")
        if not isinstance(values, list) or not values:
            raise SpecError("%s: type DISCRETE needs a non-empty discreteValues list." % where)
        values = [_number(v, where + ".discreteValues") for v in values]
        if any(b <= a for a, b in zip(values, values[1:])):
            raise SpecError("%s.discreteValues %s must be strictly increasing." % (where, values))
        return Param(name, kind, values=tuple(values))
    values = entry.get("categoricalValues")
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise SpecError("%s: type CATEGORICAL needs a non-empty categoricalValues list of strings." % where)
    if len(set(values)) != len(values):
        raise SpecError("%s.categoricalValues %s has duplicates." % (where, values))
    return Param(name, kind, values=tuple(values))


def study_spec(training_input: dict, trainer_flags=None) -> StudySpec:
    """Checks ``trainingInput.hyperparameters``; ``trainer_flags`` (option strings) checks parameter names."""
    hp = training_input.get("hyperparameters")
    if not isinstance(hp, dict):
        raise SpecError("trainingInput.hyperparameters is missing: this file configures no tuning study.")
    unknown = sorted(set(hp) - set(HYPERPARAMETER_FIELDS))
    if unknown:
        raise SpecError("trainingInput.hyperparameters: unknown field %s." % unknown[0])
    where = "trainingInput.hyperparameters."
    goal = hp.get("goal")
    if goal not in GOALS:
        raise SpecError("%sgoal %r is not one of %s." % (where, goal, ", ".join(GOALS)))
    metric = hp.get("hyperparameterMetricTag", "accuracy")
    if metric not in REPORTED_METRICS:
        raise SpecError(
            "%shyperparameterMetricTag %r: the trainer reports %s." % (where, metric, ", ".join(REPORTED_METRICS))
        )
    counts = _trial_counts(hp, where)
    algorithm = hp.get("algorithm", Algorithm.ALGORITHM_UNSPECIFIED.value)
    if algorithm not in ALGORITHMS:
        raise SpecError("%salgorithm %r is not one of %s." % (where, algorithm, ", ".join(ALGORITHMS)))
    early = hp.get("enableTrialEarlyStopping", False)
    if not isinstance(early, bool):
        raise SpecError("%senableTrialEarlyStopping %r must be true or false." % (where, early))
    resume = hp.get("resumePreviousJobId")
    if resume is not None and (not isinstance(resume, str) or not resume):
        raise SpecError("%sresumePreviousJobId %r must be a study name." % (where, resume))
    params = _params(hp, where, algorithm, trainer_flags)
    failed = counts["maxFailedTrials"] or default_max_failed_trials(counts["maxTrials"])
    return StudySpec(
        goal=goal,
        metric=metric,
        max_trials=counts["maxTrials"],
        max_parallel_trials=counts["maxParallelTrials"],
        max_failed_trials=failed,
        max_failed_trials_given=bool(counts["maxFailedTrials"]),
        early_stopping=early,
        resume_previous_job_id=resume,
        algorithm=algorithm,
        params=params,
    )


def _params(hp: dict, where: str, algorithm: str, trainer_flags) -> tuple:
    """The study's parameters: at least one, each named once, none DOUBLE under GRID_SEARCH."""
    entries = hp.get("params")
    if not isinstance(entries, list) or not entries:
        raise SpecError("%sparams must list at least one parameter." % where)
    params = tuple(_param(entry, i, trainer_flags) for i, entry in enumerate(entries))
    names = [p.name for p in params]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise SpecError("%sparams: %s is given twice." % (where, duplicated[0]))
    if algorithm == Algorithm.GRID_SEARCH:
        doubles = [p.name for p in params if p.type == ParamType.DOUBLE]
        if doubles:
            kinds = "INTEGER, DISCRETE and CATEGORICAL parameters only"
            raise SpecError("%salgorithm GRID_SEARCH takes %s: %s is DOUBLE." % (where, kinds, doubles[0]))
    return params


def _trial_counts(hp: dict, where: str) -> dict:
    """maxTrials and maxParallelTrials (at least 1) and maxFailedTrials (0: the default rule)."""
    counts = {}
    for key, default in (("maxTrials", 1), ("maxParallelTrials", 1), ("maxFailedTrials", 0)):
        value = hp.get(key, default)
        least = 0 if key == "maxFailedTrials" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SpecError("%s%s %r must be a whole number of at least %d." % (where, key, value, least))
        counts[key] = value
    return counts


def grid(params) -> dict:
    """GRID_SEARCH's search space: every INTEGER in its range, every DISCRETE and CATEGORICAL value."""
    space = {}
    for p in params:
        space[p.name] = list(range(p.min_value, p.max_value + 1)) if p.type == ParamType.INTEGER else list(p.values)
    return space
