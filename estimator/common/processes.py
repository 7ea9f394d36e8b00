"""What the commands that start trainers share: the trainer's module, ``--`` in a
command line, ending a process group, how long this process has run, its imports and its exit.

``python -m estimator.tune``, ``estimator.local_cluster`` and
``estimator.vertex`` take their own flags, then ``--``, then the trainer's;
each trainer they start runs in a session of its own (so a signal to the
group reaches its children too).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import time

# Where the kernel does not record a process's start (not Linux): the first import of this module, which
# the package's own __init__ makes before anything else.
_IMPORTED = time.monotonic()

TRAINER_MODULE = "estimator.cifar10_main"
# What the commands' imports leave out (``imports_uncollected``): no command uses them (docs/speed.md).
SKIPPED_IMPORTS = ("googleapiclient.discovery",)


def trainer_command(flags) -> list:
    """``python -m estimator.cifar10_main FLAGS`` with this interpreter."""
    return [sys.executable, "-m", TRAINER_MODULE] + list(flags)


def split_argv(argv):
    """``(own flags, trainer flags)``: what stands before and after the first ``--``."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def stop_group(process: subprocess.Popen, grace: float = 10, sig=signal.SIGTERM) -> None:
    """Ends ``process`` and its children: ``sig`` to its process group, SIGKILL after ``grace`` s.

    Nothing happens if it has already exited.
    """
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    except ProcessLookupError:
        pass


def started_at() -> float:
    """When this process started, on ``time.monotonic``'s clock (``seconds_since_start``): what
    ``--time-budget`` counts from, the interpreter's own start included; where the kernel does not say,
    when this module was first imported."""
    since = seconds_since_start()
    return time.monotonic() - since if since else _IMPORTED


def seconds_since_start(stat_path: str = "/proc/self/stat", uptime_path: str = "/proc/uptime") -> float:
    """How long ago this process started, by the kernel's record of it (Linux: its start in clock ticks
    after boot, against the uptime), so that a time budget counts the interpreter's own start too; 0.0
    where the kernel does not say."""
    try:
        with open(stat_path) as f:
            # The command name (field 2) may hold spaces: the fields after it start past its ")".
            fields = f.read().rsplit(")", 1)[1].split()
        with open(uptime_path) as f:
            uptime = float(f.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return max(0.0, uptime - started)


@contextlib.contextmanager
def imports_uncollected():
    """A command's imports (TensorFlow's above all) without the garbage collector, their objects frozen after:
    the collections TensorFlow's import set off took 0.6 s of its 2.6-3.1 s, and later ones walked its
    objects again (0.5 s of a small job's 7.4 s; Zen 4). Its import leaves about 2,000 objects of garbage,
    kept; frozen objects are freed as their references go, but never collected as a cycle.

    Also without ``SKIPPED_IMPORTS`` while they run: TensorFlow's GCE cluster resolver, which no command
    uses, imports Google's API client where it is installed (docs/speed.md)."""
    enabled = gc.isenabled()
    gc.disable()
    skipped = [name for name in SKIPPED_IMPORTS if name not in sys.modules]
    sys.modules.update(dict.fromkeys(skipped))  # None: an import of it raises ImportError
    try:
        yield
    finally:
        for name in skipped:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]  # importable again for whoever needs it later
        gc.freeze()
        if enabled:
            gc.enable()


def exit_with(status) -> None:
    """Ends the command with ``status`` as ``sys.exit`` does (atexit handlers, stdio flushed), without the
    interpreter's last garbage collections over every object TensorFlow made: those took 0.9-1.0 s of each
    command's exit (Zen 4; ``benchmarks.gc_cost``), counted in a time budget and paid by every trial and
    test. The objects are frozen instead (``gc.freeze``): still freed as their references go, but a cycle
    among them is never collected, so a ``__del__`` on one never runs, which Python does not promise at exit
    anyway; what must reach storage is closed before (the trainer's event files: ``cifar10_main``)."""
    gc.freeze()
    sys.exit(status)
