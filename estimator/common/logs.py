"""Concise logs: the lines a user needs, and ``--verbose`` for everything else.

A training run printed about 140 lines, most of them TensorFlow's deprecation
notices for its own classes (``tf.estimator`` is deprecated as a whole: no user
can act on them), the Estimator's bookkeeping ("Calling model_fn", "Graph was
finalized", ...) and google.api_core's Python-version FutureWarning. By default
those are dropped and training prints one progress line per interval
(``hooks.ProgressHook``), one line per evaluation, export and health event.
Warnings and errors of any other kind are always shown.

This module imports nothing heavy: entry points call ``quiet_imports`` before
they import TensorFlow or the Cloud libraries.
"""

from __future__ import annotations

import logging
import sys
import warnings

VERBOSE_FLAG = "--verbose"

# Messages (their start) the Estimator and TensorFlow log at INFO level about
# their own machinery; shown with --verbose.
_CHATTER = (
    "Calling model_fn",
    "Done calling model_fn",
    "Graph was finalized",
    "Running local_init_op",
    "Done running local_init_op",
    "Calling checkpoint listeners",
    "Using config:",
    "Not using Distribute Coordinator",
    "Running training and evaluation locally",
    "Start train and evaluate loop",
    "Create CheckpointSaverHook",
    "No assets to",
    "SavedModel written to",
    "Restoring parameters from",
    "Inference Time",
    "Starting evaluation at",
    "Finished evaluation at",
    "Saving dict for global step",
    "Saving 'checkpoint_path' summary",
    "global_step/sec",
    "loss = ",
    "Loss for final step",
    "Waiting for new checkpoint",
    "Skip the current checkpoint eval",
    "Summary for np.ndarray",
    "Signatures INCLUDED in export",
    "Signatures EXCLUDED from export",
    "Export checkpoint",
    "Writing graph",
    "Reading unsupported",
    "Warm-starting",
    "Checkpoint path",
    "Building graph",
    "Done building graph",
)


def verbose_requested(argv=None) -> bool:
    return VERBOSE_FLAG in (sys.argv[1:] if argv is None else argv)


def quiet_imports(argv=None) -> None:
    """Before importing the Cloud libraries: drop google.api_core's notices that a future release will drop
    this Python version, or (3.9) that its releases no longer support it: TensorFlow 2.15 runs on 3.9-3.11
    only, so there is nothing to act on."""
    if not verbose_requested(argv):
        warnings.filterwarnings(
            "ignore", message=r"You are using a (non-supported )?Python version", category=FutureWarning
        )


class _QuietFilter(logging.Filter):
    """Drops TensorFlow's deprecation notices and the Estimator's bookkeeping lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            return "is deprecated and will be removed" not in message
        if getattr(record, "ours", False):  # this package's own lines (``info``)
            return True
        return not message.startswith(_CHATTER)


_FILTER = _QuietFilter()


def configure(verbose: bool) -> None:
    """Sets TensorFlow's Python log level to INFO and, unless verbose, filters it."""
    import tensorflow as tf

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    logger = tf.get_logger()
    logger.removeFilter(_FILTER)
    if not verbose:
        logger.addFilter(_FILTER)


def info(message: str, *args) -> None:
    """Logs one of this package's own lines: never filtered as chatter."""
    import tensorflow as tf

    tf.get_logger().info(message, *args, extra={"ours": True})


def warning(message: str, *args) -> None:
    import tensorflow as tf

    tf.get_logger().warning(message, *args, extra={"ours": True})
