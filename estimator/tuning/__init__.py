"""Hyperparameter tuning, from the ``hptuning_config.yaml`` users already have.

* ``spec``: reads and checks ``trainingInput`` (machines) and
  ``trainingInput.hyperparameters`` (the study) of AI Platform Training's
  YAML, as the service read it; the one owner of that format.
* ``study``: runs a study on this machine: Optuna decides, each trial is a
  ``python -m estimator.cifar10_main`` process as the service ran it.
* ``report``: the study's table, ``trials.csv``, ``study.png`` and ``best.args``.
* ``commands``: ``python -m estimator.tune``: the study's flags checked, run, and reported.
* ``trial_flags``: what a study adds to its trials' flags (the training split, one member), locally and
  on Vertex AI alike.

Entry point: ``python -m estimator.tune``; the same study on Vertex AI: ``estimator.cloud.vertex_study``.
"""
