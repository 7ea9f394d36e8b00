"""CIFAR-10 ResNet training for TensorFlow Estimator and Google Cloud ML Engine.

The import package keeps the name of the original tutorial's folder (``estimator``)
so that ``--package-path estimator/ --module-name estimator.cifar10_main`` works
unchanged; the distribution is called ``cifar10-resnet-estimator`` because PyPI
already has an unrelated ``estimator``.
"""

import os

from estimator.common import processes  # noqa: F401 - first: the start of the process where Linux does not say

__version__ = "0.6.0"

# TensorFlow 2.15 turns oneDNN on by default only with AVX512_VNNI, AVX512_BF16 or AMX; without it an AVX2-only
# CPU trains at half speed (docs/speed.md). TF_ENABLE_ONEDNN_OPTS=0 keeps TensorFlow's own choice.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
