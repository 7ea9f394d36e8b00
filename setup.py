"""Packaging for Cloud ML Engine / Vertex AI and for local use.

The service installs this package with pip on top of its runtime, which already
provides TensorFlow: so TensorFlow is an extra (``[tf]``), never a hard
requirement that would drag a second TensorFlow over the runtime's.
"""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "estimator", "__init__.py")) as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)

setup(
    name="cifar10-resnet-estimator",
    version=VERSION,
    description="CIFAR-10 ResNets with TensorFlow Estimator, locally and on Google Cloud ML Engine / Vertex AI.",
    packages=find_packages(include=["estimator", "estimator.*"]),
    py_modules=["generate_cifar10_tfrecords"],
    # The recipes (--recipe NAME) travel with the package, to Vertex AI too.
    package_data={"estimator": ["recipes/*.args"]},
    # TensorFlow 2.15 (the last with tf.estimator) has wheels for CPython 3.9-3.11 only.
    python_requires=">=3.9,<3.12",
    install_requires=[
        "google-cloud-storage>=1.28",
        "cloudml-hypertune>=0.1.0.dev6",
        "pyyaml>=5.1",
        "requests>=2.20",
        # The archive's download (estimator.data.download): retries, verify-then-move; tqdm draws its progress.
        "pooch>=1.6",
        "tqdm>=4.40",
        "numpy>=1.16",
        # The trainer's pictures (TensorBoard images, curves.png) and preflight's PNG.
        "matplotlib>=3.5",
    ],
    extras_require={
        # Local installs; the cloud runtime (2.11 ... 2.15) brings its own TensorFlow.
        "tf": ["tensorflow-cpu>=2.11,<2.16"],
        # A GPU workstation (Linux): TensorFlow with its CUDA libraries from pip.
        "gpu": ["tensorflow[and-cuda]==2.15.1"],
        # macOS (tensorflow-cpu has no macOS wheels; tensorflow has them for Apple silicon too).
        "macos": ["tensorflow==2.15.1"],
        # benchmarks/training_speed.py compares against PyTorch; never needed to train.
        "bench": ["torch>=2.1"],
        # Local tuning studies; the cloud trainer does not need Optuna.
        "tune": ["optuna>=4.0"],
    },
    entry_points={"console_scripts": ["generate-cifar10-tfrecords=estimator.data.convert:main"]},
)
