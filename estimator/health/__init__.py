"""Training that does not fail silently: checks that run inside the trainer.

* ``nonfinite``: a NaN or infinite loss or gradient stops training at once, with
  the step, where it first appeared, the learning rate and the last good
  checkpoint, recorded in ``JOB_DIR/health.json``.

(The input checks, the data's manifest check, live with the data:
``estimator.cifar10.Cifar10DataSet.verify``.)
"""
