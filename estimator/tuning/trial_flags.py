"""What a study adds to the trainer's flags of each trial, locally (``estimator.tune``) and on Vertex AI
(``estimator.vertex hp-tuning-job``) alike.

A recipe of a final model (``--recipe cpu_5min``) trains on the training and validation splits, which leaves
nothing to report a tuning metric on: its trials train on the training split alone and report accuracy on
the validation split. And a study compares parameters, not networks: ``--network auto`` would let each
trial, timed on its own machine, choose its own member of the family, so every trial trains one member.
"""

from __future__ import annotations

from estimator.budget import family
from estimator.data import records as fmt


def for_trials(train_subsets, source: str, member: family.Member = None):
    """``(flags to append, notes)`` for the trials of a trainer that trains on ``train_subsets`` (given by
    ``source``: "--recipe NAME" or "the flags given") and, when ``member`` is given, trains that member of
    the family (the one ``--network auto`` chose, or the user named)."""
    flags, notes = [], []
    if fmt.VALIDATION in train_subsets:
        flags += ["--train-subsets", fmt.TRAIN]
        notes.append(
            "the trials train on the training split alone and report accuracy on the validation split (%s trains "
            "on %s)" % (source, " and ".join(train_subsets))
        )
    if member is not None:
        flags += member.flags()
    return flags, notes


def given(trial_args) -> list:
    """The flags a study was given, from its trials' (``for_trials``'s additions, at their end, taken off)."""
    args = list(trial_args)
    for member in family.MEMBERS:
        if args[-len(member.flags()) :] == member.flags():
            args = args[: -len(member.flags())]
            break
    if args[-2:] == ["--train-subsets", fmt.TRAIN]:
        args = args[:-2]
    return args
