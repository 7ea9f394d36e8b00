"""Jobs that survive what machines and clusters do to them.

* ``signals``: SIGTERM and SIGINT (Vertex AI taking a Spot VM back, a user's
  Ctrl-C) save a checkpoint at the current step and end with a documented exit
  code; a second signal ends at once.
* ``jobdir``: one trainer per job dir (a lock with the holder's host, pid and
  start, taken over when its holder is gone), and a job dir of another network
  refused before anything is built or written.
* storage failures (a full or read-only disk) as one line naming the path, the
  operation and the OS error: ``estimator.common.failures``, re-exported here.

``estimator.cifar10_main`` wires them around ``estimator.train.run``.
"""

from estimator.common.failures import StorageFailure, storage_failure
from estimator.resilience.jobdir import ForeignJobDirError, JobDirBusyError, JobDirLock, check_same_network
from estimator.resilience.signals import EXIT_CODES, Interrupted, SignalStop

__all__ = [
    "EXIT_CODES",
    "ForeignJobDirError",
    "Interrupted",
    "JobDirBusyError",
    "JobDirLock",
    "SignalStop",
    "StorageFailure",
    "check_same_network",
    "storage_failure",
]
