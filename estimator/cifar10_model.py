"""``ResNetCifar10`` and the network ``--network`` names, under the tutorial's name
(``estimator.networks.resnet`` and ``estimator.networks.registry``)."""

from estimator.networks.registry import NETWORKS, build, describe
from estimator.networks.resnet import VERSIONS, ResNetCifar10, check_depth, check_width

__all__ = ["NETWORKS", "VERSIONS", "ResNetCifar10", "build", "check_depth", "check_width", "describe"]
