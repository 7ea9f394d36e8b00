"""CIFAR-10 ResNet training for TensorFlow Estimator and Google Cloud ML Engine.

The import package keeps the name of the original tutorial's folder (``estimator``)
so that ``--package-path estimator/ --module-name estimator.cifar10_main`` works
unchanged; the distribution is called ``cifar10-resnet-estimator`` because PyPI
already has an unrelated ``estimator``.
"""

import os

from estimator.common import processes  # noqa: F401 - first: the start of the process where Linux does not say

__version__ = "0.5.0"

# TensorFlow 2.15 turns its oneDNN kernels on by default only on CPUs with
# AVX512_VNNI, AVX512_BF16 or AMX. On an AVX2-only CPU (an AMD EPYC here) they
# are off, training runs at half speed (ResNet-20: 175 against 350 images/s,
# benchmarks/training_speed.py) and channels_first convolutions do not run at
# all. So the package asks for them before TensorFlow is first imported; set
# TF_ENABLE_ONEDNN_OPTS=0 to keep TensorFlow's own choice.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
