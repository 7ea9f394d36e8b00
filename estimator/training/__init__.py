"""One training job's parts, from flags to the graph.

* ``hparams``: ``HParams``, the one hyperparameter object, each setting declared once as a field with
  its flag's help, group and range (``settings``: how one is declared); ``flags``: the parser, ``--help``
  and the docs' flag table made from those declarations, and the rules between flags; ``config``: flags
  and environment to ``HParams``, and ``hparams.json``.
* ``schedules``: learning rates, a plan's progress in the graph, image sizes; ``machine``: the bf16
  filter-gradient plan (``estimator.budget``, above this package: ``--time-budget``, ``--network auto`` and
  ``--precision auto``).
* ``devices``: towers and variable placement; ``model_fn``: towers, gradients consolidated on the
  parameter device, the optimizer, TTA; ``eval_metrics``; ``hooks``: progress, examples/sec, reports.

``estimator.train.run`` drives them.
"""
