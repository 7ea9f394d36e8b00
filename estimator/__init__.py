"""CIFAR-10 ResNet training for TensorFlow Estimator and Google Cloud ML Engine.

The import package keeps the name of the original tutorial's folder (``estimator``)
so that ``--package-path estimator/ --module-name estimator.cifar10_main`` works
unchanged; the distribution is called ``cifar10-resnet-estimator`` because PyPI
already has an unrelated ``estimator``.
"""

__version__ = "0.1.0"
