"""The networks; they know nothing of training.

* ``layers``: ``Network``, the base of both networks (data formats, compute dtypes, layers, residual
  units; ``ResNet`` in the tutorial's ``estimator.model_base``).
* ``resnet``: ``ResNetCifar10``, He et al. 2016's 6n+2-layer ResNets.
* ``airbench``: ``AirbenchCifar10``, the network of Keller Jordan's airbench94/96.
* ``registry``: ``build`` and ``describe``: the network ``--network`` names (``--network auto``'s family:
  ``estimator.budget.family``).
"""
