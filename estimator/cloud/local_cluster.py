"""A training job as a cluster of real local processes: what ``python -m estimator.vertex local-run`` runs a
Vertex AI config with (``estimator.cloud.rehearsal``), and the tests' clusters.

Starts a chief (or a master, as AI Platform named it), workers, parameter servers and optionally an
evaluator, each a ``python -m estimator.cifar10_main`` process (or a pool's own command) with the
``TF_CONFIG`` the service would give it, on free ports of 127.0.0.1. Their output is kept, and streamed
with a role prefix. Parameter servers never exit on their own, by design: they are ended once the chief
has finished and the workers and evaluator are done. If a process fails, the rest are stopped and the
failure is named.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from estimator.common import cluster as cluster_lib
from estimator.common import processes

HOST = "127.0.0.1"


def free_ports(count: int):
    """``count`` distinct free TCP ports on the loopback interface (all held open until each is chosen)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in sockets]


def cluster_spec(workers: int, ps: int, chief_role: str = "master"):
    ports = iter(free_ports(1 + workers + ps))
    counts = {chief_role: 1, "worker": workers, "ps": ps}
    return {role: ["%s:%d" % (HOST, next(ports)) for _ in range(n)] for role, n in counts.items() if n}


class ClusterError(RuntimeError):
    """A task failed, or the job ran out of time."""


class Task(object):
    """One process of the cluster, its output kept and streamed with a prefix."""

    def __init__(self, role, index, process, out, lock):
        self.role, self.index, self.process = role, index, process
        self.lines = []
        self._out, self._lock = out, lock
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def name(self) -> str:
        return "%s/%d" % (self.role, self.index)

    def _read(self):
        for line in iter(self.process.stdout.readline, ""):
            self.lines.append(line)
            if self._out is not None:
                with self._lock:
                    self._out.write("[%s] %s" % (self.name, line))
                    self._out.flush()

    def log(self, after: int = 0) -> str:
        """The output from line ``after`` on."""
        return "".join(self.lines[after:])

    def join_output(self, timeout=5):
        self._reader.join(timeout)


class LocalCluster(object):
    """The processes of one distributed training job on this machine."""

    def __init__(
        self,
        trainer_args,
        workers=1,
        ps=1,
        evaluator=False,
        chief_role="master",
        trial=None,
        env=None,
        out=sys.stdout,
        commands=None,
        task_env=None,
    ):
        """``chief_role``: master (AI Platform's name) or chief (Vertex AI's; an evaluator goes only beside a chief,
        as TF_CONFIG's parser says). ``commands``: {role: argv} for roles that run another command than this
        interpreter's trainer with ``trainer_args`` (a Vertex AI job's pools each run their own);
        ``task_env(role, index)``: more environment for one task (Vertex AI's per-replica variables)."""
        self.trainer_args = list(trainer_args)
        self.chief_role, self.trial, self.out = chief_role, trial, out
        self.env = dict(os.environ if env is None else env)
        self.spec = cluster_spec(workers, ps, chief_role)
        # An evaluator is in no cluster spec (TF_CONFIG names it apart).
        self.roles = [(role, i) for role, hosts in self.spec.items() for i in range(len(hosts))]
        self.roles += [("evaluator", 0)] if evaluator else []
        self.commands = dict(commands or {})
        self.task_env = task_env or (lambda role, index: {})
        self.ends_with_chief = False  # Vertex AI's way: the job ends when its primary replica does
        self.tasks = {}
        self._lock = threading.Lock()

    def start(self):
        # Parameter servers first: the others connect to them.
        for role, index in sorted(self.roles, key=lambda r: r[0] != "ps"):
            self.start_task(role, index)
        return self

    def start_task(self, role: str, index: int) -> Task:
        """Starts (or restarts, as the service does after a failure) one task."""
        env = dict(self.env, TF_CONFIG=cluster_lib.tf_config(self.spec, role, index, self.trial), PYTHONUNBUFFERED="1")
        env.update(self.task_env(role, index))
        process = subprocess.Popen(
            self.commands.get(role) or processes.trainer_command(self.trainer_args),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        task = Task(role, index, process, self.out, self._lock)
        self.tasks[(role, index)] = task
        return task

    def task(self, role: str, index: int = 0) -> Task:
        return self.tasks[(role, index)]

    def kill(self, role: str, index: int = 0, sig=signal.SIGKILL) -> None:
        processes.stop_group(self.task(role, index).process, sig=sig)

    def wait_for(self, role: str, index: int, pattern: str, timeout: float, after: int = 0) -> re.Match:
        """Waits until a task's output from its line ``after`` on matches ``pattern``; raises ClusterError
        on timeout or exit."""
        deadline = time.time() + timeout
        regex = re.compile(pattern)
        while time.time() < deadline:
            task = self.task(role, index)
            exited = task.process.poll() is not None
            if exited:
                task.join_output()  # the last lines too
            match = regex.search(task.log(after))
            if match:
                return match
            if exited:
                raise ClusterError(
                    "%s exited with %s before printing %r" % (task.name, task.process.returncode, pattern)
                )
            time.sleep(0.2)
        raise ClusterError("%s did not print %r within %d s" % (role, pattern, timeout))

    def wait(self, timeout: float = 3600, grace: float = 120) -> int:
        """Waits for the job; returns the master's exit code.

        Raises:
          ClusterError: a task failed (the rest are stopped first) or time ran out.
        """
        deadline = time.time() + timeout
        chief_done_at = None
        try:
            while True:
                for task in list(self.tasks.values()):
                    code = task.process.poll()
                    if code is not None and (code or task.role == "ps"):  # a parameter server never ends by itself
                        task.join_output()
                        raise ClusterError(
                            "%s failed with exit code %d; stopped the other tasks. Its last lines:\n%s"
                            % (task.name, code, task.log(-15))
                        )
                chief = self.task(self.chief_role, 0)
                if chief.process.poll() == 0 and chief_done_at is None:
                    chief_done_at = time.time()
                    if self.ends_with_chief:
                        return 0  # the other tasks are stopped below, finished or not
                others = [t for t in self.tasks.values() if t.role in ("worker", "evaluator")]
                if chief_done_at is not None and all(t.process.poll() == 0 for t in others):
                    return 0
                if chief_done_at is not None and time.time() > chief_done_at + grace:
                    running = [t.name for t in others if t.process.poll() is None]
                    late = ", ".join(running)
                    raise ClusterError(
                        "%s finished, but %s still ran %d s later; stopped them." % (chief.name, late, grace)
                    )
                if time.time() > deadline:
                    raise ClusterError("the job did not finish within %d s; stopped every task." % timeout)
                time.sleep(0.2)
        finally:
            self.stop()

    def stop(self, grace: float = 10) -> None:
        """Ends every task still running: SIGTERM, then SIGKILL."""
        running = [t for t in self.tasks.values() if t.process.poll() is None]
        for task in running:  # all at once, then wait: the grace is the job's, not each task's
            with contextlib.suppress(ProcessLookupError):
                os.killpg(task.process.pid, signal.SIGTERM)
        deadline = time.time() + grace
        for task in running:
            processes.stop_group(task.process, grace=max(0.1, deadline - time.time()))
        for task in self.tasks.values():
            task.join_output()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
