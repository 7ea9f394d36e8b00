"""``Cifar10DataSet``, the input pipeline, under the tutorial's name (``estimator.data.pipeline``)."""

from estimator.data.pipeline import (
    Cifar10DataSet,
    CorruptDataError,
    MissingDataError,
    decode,
    distort,
    pipeline_options,
    verify_splits,
)

__all__ = [
    "Cifar10DataSet",
    "CorruptDataError",
    "MissingDataError",
    "decode",
    "distort",
    "pipeline_options",
    "verify_splits",
]
