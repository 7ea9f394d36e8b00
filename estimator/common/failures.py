"""Storage failures as one line: the path, the operation and the OS error.

A full disk or a read-only directory surfaces from Python (``OSError``) or
from TensorFlow's own file system (checkpoints, summaries, graph files:
``tf.errors.OpError`` whose message carries the OS error). Either way the user
gets one line such as::

    error: cannot write /jobs/j/model.ckpt-200.index (checkpoint): No space left on device [Errno 28]

and, with ``--verbose``, the traceback. Temporary files that a failed write
left in the job dir are removed.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil

# Errors of the file system rather than of the program.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}
_TF_STORAGE = re.compile(r"No space left on device|Read-only file system|Permission denied|Disk quota exceeded")


class JobStop(RuntimeError):
    """One of the job's own stops (a NaN, a health rule, a busy job dir, a signal): one line, then ``exit_status``."""

    exit_status = 1


class StorageFailure(RuntimeError):
    """What ``storage_failure`` makes of an error: the one line to print."""


def storage_failure(error):
    """The one-line ``StorageFailure`` for a storage error, or None for any other error."""
    if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS:
        path = error.filename or "?"
        operation = "write" if error.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT) else "access"
        return StorageFailure("cannot %s %s: %s [Errno %d]" % (operation, path, error.strerror, error.errno))
    message = getattr(error, "message", None) or str(error)
    if type(error).__module__.startswith("tensorflow") and _TF_STORAGE.search(message):
        path = re.search(r"(/[^\s:;,'\"]+|gs://[^\s:;,'\"]+)", message)
        what = "checkpoint" if "ckpt" in message else "summary" if "tfevents" in message else "file"
        reason = _TF_STORAGE.search(message).group(0)
        return StorageFailure("cannot write %s (%s): %s" % (path.group(1) if path else "the job dir", what, reason))
    return None


def remove_partial_files(job_dir: str) -> list:
    """Removes what interrupted writes leave in a local job dir: TensorFlow's ``*_temp*`` and ``*.tmp<hex>``
    checkpoint directories and files, and ``.*.tmp`` files of ``estimator.common.storage``."""
    if not job_dir or job_dir.startswith("gs://") or not os.path.isdir(job_dir):
        return []
    removed = []
    for pattern in ("*_temp*", ".*.tmp", "*.tmp-*", "*.tmp[0-9a-f]*", "*.tempstate*"):
        for path in glob.glob(os.path.join(job_dir, pattern)):
            try:
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
                removed.append(path)
            except OSError:
                pass
    return removed
