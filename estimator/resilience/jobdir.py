"""One trainer per job dir, and only the network the job dir holds.

**The lock.** Two trainers on one job dir overwrite each other's checkpoints
and records without a word. The trainer (the chief, in a cluster: the job dir
is shared by its tasks by design) holds ``JOB_DIR/job.lock`` while it runs: a
JSON object with the holder's host, pid and start, and a heartbeat the holder
renews every ``HEARTBEAT_SECS``. A second trainer exits at once naming the job
dir and the holder. A holder that is gone is taken over, said in one line:
a pid that no longer runs on this host, or (on another host, e.g. a restarted
Vertex AI worker) no heartbeat for ``STALE_SECS``. On ``gs://`` the lock is an
object created and renewed with generation preconditions (create only if
absent; renew or take over only the generation read), so two trainers cannot
both win a race.

**Another network.** A job dir's checkpoints belong to the network that wrote
them; restoring them into another fails deep inside TensorFlow with a page of
"Key not found in checkpoint", or worse, resumes a job that is not the one
asked for. ``check_same_network`` compares the flags that shape the checkpoint
with the job dir's ``hparams.json`` before anything is built or written, and
names each difference with both values and the fix. Flags that can change on a
restart (steps, learning rate, precision, batch size, ...) stay free.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from estimator.common import storage
from estimator.common.failures import JobStop
from estimator.common.options import network_shape
from estimator.training import config, hparams, settings

LOCK_FILE = "job.lock"
HEARTBEAT_SECS = 30.0
# A holder on another host with no heartbeat for this long is gone (a VM taken
# back does not remove its lock): 10 heartbeats.
STALE_SECS = 300.0

# What shapes the checkpoint: its variables and their shapes.
NETWORK_FLAGS = network_shape(hparams.HParams)
# Flags whose value may change on a restart, but whose being on or off changes the checkpoint's variables,
# and the optimizer, whose slots are the checkpoint's (Momentum's, or Muon's buffers).
SWITCH_FLAGS = ("lookahead",)
OPTIMIZER_FLAGS = ("optimizer",)


class JobDirBusyError(JobStop):
    """Another trainer holds the job dir."""

    exit_status = 75


class ForeignJobDirError(ValueError):
    """The job dir holds another network's checkpoints."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(holder: dict) -> str:
    return "pid %s on %s since %s" % (
        holder.get("pid"),
        holder.get("host"),
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("since", 0))),
    )


class JobDirLock:
    """``JOB_DIR/job.lock`` for the life of a trainer (a context manager)."""

    def __init__(self, job_dir: str, log=None, heartbeat_secs: float = HEARTBEAT_SECS, stale_secs: float = STALE_SECS):
        self.job_dir = job_dir
        self.path = storage.join(job_dir, LOCK_FILE)
        self.log = log or (lambda message: None)
        self.heartbeat_secs = heartbeat_secs
        self.stale_secs = stale_secs
        self.record = None
        self._generation = None
        self._stop = threading.Event()
        self._thread = None

    # -- the lock record, locally or on gs:// ------------------------------------------------------

    def _read(self):
        """(record, generation) of the lock, or (None, None) when there is none."""
        if storage.is_gcs(self.path):
            blob = storage.blob(self.path)
            if not blob.exists():
                return None, None
            blob.reload()
            return json.loads(blob.download_as_text()), blob.generation
        try:
            with open(self.path) as f:
                return json.load(f), None
        except FileNotFoundError:
            return None, None
        except ValueError:
            return {}, None  # half-written by a holder killed mid-write: no holder to respect

    def _create(self, record: dict, replace_generation=None) -> bool:
        """Writes the lock if it is still as read (absent, or at ``replace_generation``); False if another
        trainer got there first."""
        text = json.dumps(record, sort_keys=True)
        if storage.is_gcs(self.path):
            from google.api_core import exceptions  # google-cloud-storage's, loaded by gs:// paths only

            blob = storage.blob(self.path)
            try:
                blob.upload_from_string(text, if_generation_match=replace_generation or 0)
            except exceptions.PreconditionFailed:
                return False
            blob.reload()
            self._generation = blob.generation
            return True
        storage.makedirs(self.job_dir)
        if replace_generation == "stale":
            storage.remove(self.path)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return True

    # -- acquire, renew, release -------------------------------------------------------------------

    def acquire(self) -> JobDirLock:
        """Takes the lock, or raises ``JobDirBusyError`` naming the holder."""
        now = time.time()
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "since": now, "heartbeat": now}
        for _ in range(3):
            holder, generation = self._read()
            if holder is None:
                if self._create(self.record):
                    break
                continue  # another trainer created it meanwhile: look at it
            gone = self._gone(holder)
            if not gone:
                busy = "%s is in use by another trainer (%s)" % (self.job_dir, _describe(holder))
                raise JobDirBusyError("%s: wait for it to end, stop it, or use another --job-dir." % busy)
            if self._create(self.record, replace_generation=generation if storage.is_gcs(self.path) else "stale"):
                self.log(
                    "taking over %s from a trainer that is gone (%s: %s)" % (self.job_dir, _describe(holder), gone)
                )
                break
        else:
            raise JobDirBusyError("%s: another trainer keeps taking the lock; use another --job-dir." % self.job_dir)
        self._thread = threading.Thread(target=self._beat, name="job_dir_heartbeat", daemon=True)
        self._thread.start()
        return self

    def _gone(self, holder: dict):
        """Why the holder is gone, or None while it is alive."""
        if not holder:
            return "an unreadable lock"
        if holder.get("host") == socket.gethostname() and not _alive(int(holder.get("pid", -1))):
            return "its process no longer runs"
        age = time.time() - float(holder.get("heartbeat", 0))
        if holder.get("host") != socket.gethostname() and age > self.stale_secs:
            return "no heartbeat for %d s" % age
        return None

    def _beat(self):
        while not self._stop.wait(self.heartbeat_secs):
            self.record["heartbeat"] = time.time()
            try:
                if storage.is_gcs(self.path):
                    blob = storage.blob(self.path)
                    blob.upload_from_string(
                        json.dumps(self.record, sort_keys=True), if_generation_match=self._generation
                    )
                    blob.reload()
                    self._generation = blob.generation
                else:
                    storage.write_text(self.path, json.dumps(self.record, sort_keys=True))
            except Exception:  # noqa: BLE001 - a missed heartbeat is not worth ending training for
                pass

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        holder, _ = self._read()
        if holder and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
            storage.remove(self.path)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def check_same_network(hp) -> None:
    """Raises ``ForeignJobDirError`` if ``hp.job_dir``'s hparams.json records another network, or an
    option this version retired (``hparams.RETIRED``) switched on: it cannot be trained on.

    Reads only; the job dir is left exactly as it was.
    """

    path = storage.join(hp.job_dir, config.HPARAMS_FILE)
    if not storage.exists(path):
        return
    recorded = json.loads(storage.read_text(path)).get("hparams", {})
    try:
        hparams.refuse_retired(hp.job_dir, recorded, "restart")
    except ValueError as e:
        raise ForeignJobDirError(str(e)) from None
    defaults = hparams.HParams(data_dir="", job_dir="")
    differences = []
    for name in NETWORK_FLAGS + OPTIMIZER_FLAGS + SWITCH_FLAGS:
        theirs = recorded.get(name, getattr(defaults, name))
        theirs = tuple(theirs) if isinstance(theirs, list) else theirs  # JSON's lists are the flags' tuples
        ours = getattr(hp, name)
        if name in SWITCH_FLAGS:
            if bool(theirs) != bool(ours):
                # As the flag is written: --lookahead false.
                shown = [str(v).lower() if isinstance(v, bool) else v for v in (ours, theirs)]
                differences.append((settings.flag_name(name), *shown))
        elif theirs != ours:
            differences.append((settings.flag_name(name), ours, theirs))
    if differences:
        said = "; ".join("%s is %s here, %s in its hparams.json" % (f, _words(o), _words(t)) for f, o, t in differences)
        own = " ".join("%s %s" % (f, _words(t)) if t is not None else "no " + f for f, _, t in differences)
        raise ForeignJobDirError(
            "%s holds another network's checkpoints: %s. Use another --job-dir, or this job's own flags (%s)."
            % (hp.job_dir, said, own)
        )


def _words(value) -> str:
    """A recorded value as its flag takes it: ``32 192 192`` for a list flag's."""
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)
