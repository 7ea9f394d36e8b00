"""Training that does not fail silently: checks that run inside the trainer.

* ``rules``: the health rules, pure functions with their sources;
  ``probes``: the tensors they read, built in ``model_fn``;
  ``monitor``: the hook and the after-evaluation check that run them and
  report to TensorBoard (``health/<rule>``), the log and ``JOB_DIR/health.json``.
* ``before_run``: Karpathy's checks before a run (``python -m estimator.preflight``).

The NaN guard (exit status 3) is the core's: ``estimator.training.nonfinite``; the job loads this package only under
``--health-checks warn`` or ``stop``, as the guest ``HealthChecks``.

The pictures they draw are ``estimator.reporting.pictures``'s; the data's manifest check lives with
the data: ``estimator.data.pipeline.Cifar10DataSet.verify``.
"""

__all__ = ["EXIT_STATUS", "EvalHealth", "HealthChecks", "HealthHook", "HealthMonitor", "HealthStop"]


def __getattr__(name):
    # The monitor's names, as before, loaded on first use: the flags (which read ``rules``) are checked
    # before TensorFlow loads.
    if name in __all__:
        from estimator.health import monitor

        return getattr(monitor, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
