"""From checkpoints to a servable model.

* ``signatures``: the SavedModel's interface (inputs, outputs, image decoding)
  and ``export_saved_model``, which writes one from a checkpoint.
* ``exporters``: what training exports after evaluations (the best model by
  validation accuracy) and at the end (the final model).

Entry points: ``python -m estimator.export`` and ``python -m estimator.predict``.
"""
