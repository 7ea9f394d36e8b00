"""What a feature offers the job: ``Guest``, the one protocol between ``estimator.train.run`` and the features.

The job knows no feature. The entry point (``estimator.cifar10_main``) hands it a list of guests, and it calls each at
its steps, as TF Model Garden's run loop takes hooks from ``hooks_helper`` and Lightning's loop calls its callbacks.
Every method does nothing by default; a guest overrides the steps it takes part in. The guests of this package: the
health rules (``estimator.health``), the exports (``estimator.serving``), the signal stop (``estimator.resilience``)
and the time budget (``estimator.budget``); docs/layout.md lists what each adds.
"""

from __future__ import annotations

import typing


class TrainingGraph(typing.NamedTuple):
    """What ``model_fn`` shows a guest of the training graph it has just built (first tower: ``model``)."""

    hp: object
    gradvars: list
    learning_rate: object
    model: object
    images: object
    labels: object


class Guest:
    """A feature hosted by the job: each method is called at one step of ``estimator.train.run``."""

    def add_to_graph(self, graph: TrainingGraph) -> None:
        """In ``model_fn`` (training), after the gradients are averaged."""

    def train_hooks(self) -> list:
        """``SessionRunHook``s beside training."""
        return []

    def eval_hooks(self) -> list:
        """``SessionRunHook``s of the validation evaluations during training."""
        return []

    def after_eval(self) -> list:
        """``tf.estimator.Exporter``s called after each validation evaluation."""
        return []

    def saving_listeners(self) -> list:
        """``CheckpointSaverListener``s told of each checkpoint training saves."""
        return []

    def before_training(self, estimator) -> bool:
        """Before training starts; False when there is nothing left to train (the job then evaluates)."""
        return True

    def after_training(self) -> None:
        """After training (a short run's: before its one validation); may raise to end the job before its records
        are written."""

    def before_test(self, hp, estimator):
        """On the chief before the test evaluation: the hyperparameters it runs with (``hp``, or a copy)."""
        return hp

    def results(self, results: dict, test_eval_secs: tuple) -> dict:
        """What this guest adds to results.json (``test_eval_secs``: the test evaluation's set-up and whole time)."""
        return {}
