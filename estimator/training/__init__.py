"""One training job's parts, from flags to the graph.

* ``flags``: the trainer's flags (``--help``) and their validation; ``hparams``: ``HParams``, the one
  hyperparameter object; ``config``: flags and environment to ``HParams``, and ``hparams.json``.
* ``schedules``: learning rates and image sizes; ``time_budget``: ``--time-budget``'s planner;
  ``precision``: ``--precision auto`` and the evaluation's speed, timed.
* ``devices``: towers and variable placement; ``model_fn``: towers, gradients consolidated on the
  parameter device, the optimizer, TTA; ``eval_metrics``; ``hooks``: progress, examples/sec, reports.

``estimator.train.run`` drives them.
"""
