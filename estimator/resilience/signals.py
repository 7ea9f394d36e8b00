"""SIGTERM and SIGINT save the work; a second signal ends at once.

Vertex AI sends SIGTERM to a worker before it restarts it or takes its Spot
VM back (and SIGKILL some seconds later); a user at a terminal presses Ctrl-C.
Either way the trainer (the chief: it owns the checkpoints) should leave a
checkpoint at the step it reached, say how to go on, and end:

* during training the signal only sets a flag; ``hook()`` asks the session to
  stop after the current step, and the Estimator's checkpoint saver writes
  the checkpoint as the session ends (its ``end``), at that very step;
* after training (final evaluations, exports) there is nothing to save: the
  signal raises ``Interrupted`` at once, before ``results.json`` is written;
  the same command evaluates and exports again;
* a second signal while the first is being handled (a slow save) ends the
  process at once with the same exit code.

Exit codes, the shell's convention: 143 (128 + 15) for SIGTERM, 130
(128 + 2) for SIGINT. ``results.json`` is written only by a run that ends.
"""

from __future__ import annotations

import os
import signal
import sys

import tensorflow as tf

from estimator.common.failures import JobStop
from estimator.training.guest import Guest

EXIT_CODES = {signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: 128 + signal.SIGINT}


class Interrupted(JobStop):
    """The job was asked to stop by a signal; ``signum`` says which."""

    def __init__(self, signum: int, message: str = ""):
        super().__init__(message or "interrupted by %s" % signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return EXIT_CODES[self.signum]


class SignalStop(Guest):
    """Turns SIGTERM and SIGINT into a stop at the next step (``hook``) or, outside training, ``Interrupted``; the
    job's guest on the chief (it owns the checkpoints)."""

    def __init__(self):
        self.signum = None
        self.training = False
        self._previous = {}

    def install(self) -> SignalStop:
        for signum in EXIT_CODES:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signum is not None:
            # A second signal: the user or the service will not wait for the save.
            sys.stderr.write("%s again: ending at once.\n" % signal.Signals(signum).name)
            sys.stderr.flush()
            os._exit(EXIT_CODES[signum])
        self.signum = signum
        name = signal.Signals(signum).name
        if self.training:
            sys.stderr.write(
                "%s: saving a checkpoint at the current step, then stopping (again: stop at once).\n" % name
            )
            sys.stderr.flush()
        else:
            raise Interrupted(signum)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self) -> None:
        """Raises ``Interrupted`` if a signal came (after training returned)."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    def hook(self):
        """A ``SessionRunHook`` that ends the session after the step during which a signal came."""
        return _StopOnSignal(self)

    def eval_hook(self):
        """A hook for evaluations during training: none starts once a signal came (the
        checkpoint is saved; evaluating it would only delay the end)."""
        return _NoEvalAfterSignal(self)

    def train_hooks(self) -> list:
        return [self.hook()]

    def eval_hooks(self) -> list:
        return [self.eval_hook()]

    def after_training(self) -> None:
        self.check()  # a signal during training: the checkpoint is saved, end before any record is written


class _StopOnSignal(tf.compat.v1.train.SessionRunHook):
    def __init__(self, stop: SignalStop):
        self._stop = stop

    def begin(self):
        self._stop.training = True

    def after_run(self, run_context, run_values):
        if self._stop.requested:
            run_context.request_stop()

    def end(self, session):
        self._stop.training = False


class _NoEvalAfterSignal(tf.compat.v1.train.SessionRunHook):
    def __init__(self, stop: SignalStop):
        self._stop = stop

    def begin(self):
        self._stop.check()
