"""Kernels faster than TensorFlow's own on these CPUs, and the speed probes that choose them.

* ``gelu``: GELU as two XLA-compiled kernels.
* ``filter_gradient``: bf16 convolutions' filter gradients as matrix products where timed faster.
* ``probe_cache``: this CPU, and the JSON cache of every speed probe (imports nothing of the package).
"""
