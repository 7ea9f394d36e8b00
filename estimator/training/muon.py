"""``--optimizer muon``: Muon for the convolution filters, Nesterov SGD for everything else.

Muon (Jordan et al. 2024, the optimizer of airbench94_muon) gives each 4-D convolution filter Nesterov
momentum, orthogonalises the update by a quintic Newton-Schulz iteration (the filter as a matrix of its
output channels against the rest), renormalises the filter to norm sqrt(output channels) every step in place
of weight decay, and steps at a rate of its own that decays linearly to 0 over the plan (no warm-up). The
other variables (batch-norm shifts, the head) keep the SGD step of ``--momentum`` and the learning-rate
schedule. ``MuonOptimizer`` is a ``MomentumOptimizer`` whose momentum slot doubles as Muon's buffer, so the
buffers are in every checkpoint, and SyncReplicas, loss scaling and towers wrap it as they wrap SGD.
"""

from __future__ import annotations

import tensorflow as tf

v1 = tf.compat.v1

# The quintic iteration's coefficients and steps (airbench94_muon): maximal slope at zero, so that three
# steps from X / |X| bring every singular value into about [0.5, 1.5].
NEWTON_SCHULZ = (3.4445, -4.7750, 2.0315)
NEWTON_SCHULZ_STEPS = 3


def newton_schulz(matrix, steps: int = NEWTON_SCHULZ_STEPS, eps: float = 1e-7, dtype=tf.float32):
    """The orthogonalised ``matrix`` (2-D, float32): its singular vectors kept, its singular values brought
    near 1, computed in ``dtype`` (bf16 as airbench94_muon does, where the network computes in it) and returned
    in float32. The iteration runs on the wide orientation (the tall side transposed), where ``X X^T`` is smaller."""
    a, b, c = NEWTON_SCHULZ
    tall = matrix.shape[0] > matrix.shape[1]
    x = tf.transpose(matrix) if tall else matrix
    x = tf.cast(x / (tf.norm(x) + eps), dtype)
    for _ in range(steps):
        gram = tf.matmul(x, x, transpose_b=True)
        x = a * x + tf.matmul(b * gram + c * tf.matmul(gram, gram), x)
    x = tf.cast(x, tf.float32)
    return tf.transpose(x) if tall else x


def is_filter(variable) -> bool:
    """What Muon steps: trainable 4-D convolution filters (``[k, k, in, out]``)."""
    return variable.shape.rank == 4


class MuonOptimizer(v1.train.MomentumOptimizer):
    """Muon on the filters (``is_filter``), Nesterov-or-not SGD with momentum on the rest.

    Args:
      learning_rate: the other variables' rate (the schedule's tensor).
      momentum, use_nesterov: the other variables' SGD.
      muon_learning_rate: the filters' rate (a tensor: it decays with the plan).
      muon_momentum: the filters' (Nesterov) momentum.
      iteration_dtype: what Newton-Schulz computes in (the network's compute dtype).
    """

    def __init__(
        self, learning_rate, momentum, muon_learning_rate, muon_momentum, use_nesterov=False, iteration_dtype=tf.float32
    ):
        super().__init__(learning_rate, momentum, use_nesterov=use_nesterov, name="Muon")
        self._muon_learning_rate = muon_learning_rate
        self._muon_momentum = muon_momentum
        self._iteration_dtype = iteration_dtype

    def _resource_apply_dense(self, grad, var):
        if not is_filter(var):
            return super()._resource_apply_dense(grad, var)
        return self._muon_step(grad, var)

    def _apply_dense(self, grad, var):
        if not is_filter(var):
            return super()._apply_dense(grad, var)
        return self._muon_step(grad, var)

    def _muon_step(self, grad, var):
        buffer = self.get_slot(var, "momentum")
        beta = tf.cast(self._muon_momentum, var.dtype.base_dtype)
        new_buffer = buffer.assign(beta * buffer + grad)
        nesterov = grad + beta * new_buffer
        out = int(var.shape[-1])
        matrix = tf.reshape(nesterov, [-1, out])
        update = tf.reshape(newton_schulz(matrix, dtype=self._iteration_dtype), tf.shape(var))
        renormalised = var * (out**0.5 / (tf.norm(var) + 1e-12))
        rate = tf.cast(self._muon_learning_rate, var.dtype.base_dtype)
        return var.assign(renormalised - rate * update)
