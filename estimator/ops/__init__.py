"""Kernels faster than TensorFlow's own on these CPUs.

* ``gelu``: GELU as two XLA-compiled kernels.
* ``filter_gradient``: bf16 convolutions' filter gradients as matrix products where timed faster.
"""
