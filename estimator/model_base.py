"""``ResNet``, the base of the networks' layers, under the tutorial's name (``estimator.networks.layers``)."""

from estimator.networks.layers import COMPUTE_DTYPES, DATA_FORMATS, ResNet

__all__ = ["COMPUTE_DTYPES", "DATA_FORMATS", "ResNet"]
