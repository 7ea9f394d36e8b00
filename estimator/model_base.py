"""``ResNet``: ``estimator.networks.layers.Network``, the base of the networks, under the tutorial's name."""

from estimator.networks.layers import COMPUTE_DTYPES, DATA_FORMATS, ResNet

__all__ = ["COMPUTE_DTYPES", "DATA_FORMATS", "ResNet"]
