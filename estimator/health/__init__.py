"""Training that does not fail silently: checks that run inside the trainer.

* ``nonfinite``: a NaN or infinite loss or gradient stops training at once, with
  the step, where it first appeared, the learning rate and the last good
  checkpoint (exit status 3).
* ``rules``: the health rules, pure functions with their sources;
  ``probes``: the tensors they read, built in ``model_fn``;
  ``monitor``: the hook and the after-evaluation check that run them and
  report to TensorBoard (``health/<rule>``), the log and ``JOB_DIR/health.json``.
* ``before_run``: Karpathy's checks before a run (``python -m estimator.preflight``).

The pictures they draw are ``estimator.reporting.pictures``'s; the data's manifest check lives with
the data: ``estimator.data.pipeline.Cifar10DataSet.verify``.
"""

from estimator.health.monitor import EXIT_STATUS, EvalHealth, HealthHook, HealthMonitor, HealthStop

__all__ = ["EXIT_STATUS", "EvalHealth", "HealthHook", "HealthMonitor", "HealthStop"]
