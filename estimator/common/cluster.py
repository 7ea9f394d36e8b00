"""Reads ``TF_CONFIG``, the cluster description Cloud ML Engine and Vertex AI set.

The services set, for every process of a job::

    {"cluster": {"master": [...], "worker": [...], "ps": [...]},
     "task": {"type": "worker", "index": 0, "trial": "3"},
     "environment": "cloud"}

(``chief`` instead of ``master`` on Vertex AI and with ``useChiefInTfConfig``;
an ``evaluator`` task is not listed in ``cluster``.) The Estimator parses it
again itself; validating it here first turns a malformed value into one clear
message instead of a stack trace deep inside ``RunConfig``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import time
from dataclasses import dataclass, field

ROLES = ("chief", "master", "worker", "ps", "evaluator")
TRAINING_ROLES = ("chief", "master", "worker")


class ClusterConfigError(ValueError):
    """TF_CONFIG is malformed."""


@dataclass(frozen=True)
class Cluster:
    """This process's place in the job (a single local process when TF_CONFIG is unset)."""

    spec: dict = field(default_factory=dict)  # role -> list of "host:port"
    task_type: str = None  # None when training locally
    task_index: int = 0
    trial: str = None  # hyperparameter tuning trial id, if any
    evaluator: bool = False  # an evaluator task beside it (Vertex AI's CLUSTER_SPEC; TF_CONFIG never lists one)

    @property
    def distributed(self) -> bool:
        return bool(self.spec)

    @property
    def num_workers(self) -> int:
        """Processes that train: master/chief plus workers (1 locally)."""
        if not self.spec:
            return 1
        return sum(len(self.spec.get(role, ())) for role in TRAINING_ROLES) or 1

    @property
    def is_chief(self) -> bool:
        """The process that checkpoints, evaluates and writes results."""
        if not self.spec:
            return True
        if self.task_type in ("chief", "master"):
            return True
        # Without a master or chief, worker 0 is the chief (Estimator convention).
        has_chief = any(self.spec.get(r) for r in ("chief", "master"))
        return self.task_type == "worker" and self.task_index == 0 and not has_chief


def parse(text, trial=None, alone=True) -> Cluster:
    """Parses a TF_CONFIG value (None or empty: local training).

    ``trial``: ``CLOUD_ML_TRIAL_ID`` (AI Platform's tuning trial), used when
    ``task.trial`` does not name one. ``alone``: no task outside TF_CONFIG's
    cluster (an evaluator is never listed there): a cluster of this one
    training task is then a single local process.

    Raises:
      ClusterConfigError: naming what is wrong and what a valid value looks like.
    """
    if not text or not text.strip():
        return Cluster(trial=trial or None)
    spec, task = _spec_and_task(text)
    task_type = task.get("type")
    trial = task.get("trial") or trial or None
    if not spec:
        # The Estimator's rule: without a cluster, a task can only be worker 0.
        if task_type not in (None, "", "worker") or task.get("index", 0) not in (0, "0"):
            raise ClusterConfigError(
                "TF_CONFIG task %r has no cluster to belong to: give a 'cluster' or drop it." % (task,)
            )
        return Cluster(trial=str(trial) if trial else None)
    index = _task_index(spec, task)
    if "chief" in spec and "master" in spec:
        raise ClusterConfigError("TF_CONFIG has both 'chief' and 'master': use one.")
    if task_type == "evaluator" and "master" in spec:
        raise ClusterConfigError("TF_CONFIG has an evaluator beside a master, which evaluates itself: name it 'chief'.")
    if not any(spec.get(role) for role in TRAINING_ROLES):
        raise ClusterConfigError("TF_CONFIG cluster has no master, chief or worker to train.")
    trial = str(trial) if trial else None
    if alone and task_type != "evaluator" and sum(len(a) for a in spec.values()) == 1:
        # Vertex AI gives a job of one machine TF_CONFIG {"cluster": {"chief": [itself]}, "task": {"type":
        # "chief"}} (AI Platform: "master"): one process, which trains, evaluates and plans a budget alone.
        return Cluster(trial=trial)
    return Cluster(spec=spec, task_type=task_type, task_index=index, trial=trial)


def _spec_and_task(text: str):
    """TF_CONFIG's ``(cluster, task)``, the cluster's roles checked and its addresses as lists."""
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ClusterConfigError("TF_CONFIG is not valid JSON (%s): %r." % (e, text[:200])) from e
    if not isinstance(config, dict):
        raise ClusterConfigError("TF_CONFIG must be a JSON object, got %r." % (config,))
    spec = config.get("cluster") or {}
    task = config.get("task") or {}
    if not isinstance(spec, dict) or not isinstance(task, dict):
        raise ClusterConfigError("TF_CONFIG 'cluster' and 'task' must be JSON objects.")
    for role, addresses in spec.items():
        if role not in ROLES:
            raise ClusterConfigError("TF_CONFIG cluster has unknown role %r: roles are %s." % (role, ", ".join(ROLES)))
        if isinstance(addresses, dict):  # sparse form {"0": "host:port"}
            addresses = [addresses[k] for k in sorted(addresses, key=int)]
        if not isinstance(addresses, list) or not all(isinstance(a, str) and ":" in a for a in addresses):
            raise ClusterConfigError(
                'TF_CONFIG cluster role %r must list "host:port" addresses, got %r.' % (role, addresses)
            )
    return {r: list(a.values()) if isinstance(a, dict) else list(a) for r, a in spec.items()}, task


def _task_index(spec: dict, task: dict) -> int:
    """The task's index, checked against its role's addresses (an evaluator is never listed: index 0)."""
    task_type = task.get("type")
    if task_type not in ROLES:
        raise ClusterConfigError("TF_CONFIG task type %r is not one of %s." % (task_type, ", ".join(ROLES)))
    try:
        index = int(task.get("index", 0))
    except (TypeError, ValueError):
        raise ClusterConfigError("TF_CONFIG task index %r is not an integer." % (task.get("index"),)) from None
    if task_type == "evaluator":
        if index != 0:
            raise ClusterConfigError("TF_CONFIG evaluator index must be 0, got %d." % index)
        return index
    count = len(spec.get(task_type, ()))
    if not 0 <= index < count:
        raise ClusterConfigError(
            "TF_CONFIG task %s index %d is out of range: the cluster has %d." % (task_type, index, count)
        )
    return index


def from_environment(environ=None) -> Cluster:
    """``TF_CONFIG`` and ``CLOUD_ML_TRIAL_ID`` of ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    pools = _pools(environ.get("CLUSTER_SPEC"))
    alone = sum(len(replicas) for replicas in pools.values()) <= 1  # without CLUSTER_SPEC, TF_CONFIG is all
    cluster = parse(environ.get("TF_CONFIG"), environ.get("CLOUD_ML_TRIAL_ID"), alone=alone)
    if cluster.distributed and pools.get("workerpool3"):
        return dataclasses.replace(cluster, evaluator=True)
    return cluster


def _pools(cluster_spec) -> dict:
    """Vertex AI's ``CLUSTER_SPEC`` pools (``workerpool0``..``3``: an evaluator's pool too), or {}."""
    try:
        pools = (json.loads(cluster_spec) or {}).get("cluster") or {} if cluster_spec else {}
        return pools if isinstance(pools, dict) else {}
    except (ValueError, AttributeError, TypeError):
        return {}


@contextlib.contextmanager
def hidden_from_estimator(cluster: Cluster):
    """While the Estimator's ``RunConfig`` is built: no TF_CONFIG when it describes this one process alone
    (``parse``), which would otherwise start a gRPC server and train as a chief with nobody to evaluate."""
    saved = os.environ.get("TF_CONFIG")
    if cluster.distributed or saved is None:
        yield
        return
    del os.environ["TF_CONFIG"]
    try:
        yield
    finally:
        os.environ["TF_CONFIG"] = saved


def tf_config(spec: dict, task_type: str, index: int, trial=None) -> str:
    """The ``TF_CONFIG`` value the services give one task (what ``parse`` reads back)."""
    task = {"type": task_type, "index": index}
    if trial is not None:
        task["trial"] = str(trial)
    config = {"task": task, "environment": "cloud"}
    if spec:
        config["cluster"] = spec
    return json.dumps(config)


class UnreachableError(RuntimeError):
    """A parameter server did not accept connections in time."""


def wait_for_parameter_servers(cluster: Cluster, timeout: float, poll: float = 0.5) -> None:
    """Waits until every parameter server accepts TCP connections.

    Without this a worker whose parameter server never comes up waits forever
    in TensorFlow's ``CreateSession`` ("still waiting for response from
    /job:ps/..."). The services start all tasks of a job at about the same time,
    so a few minutes' wait is normal; an address that never answers is an error.

    Raises:
      UnreachableError: naming the parameter server and its address.
    """
    deadline = time.time() + timeout
    for index, address in enumerate(cluster.spec.get("ps", ())):
        host, _, port = address.rpartition(":")
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=min(5.0, max(poll, timeout))).close()
                break
            except OSError as e:
                if time.time() >= deadline:
                    where = "parameter server ps/%d at %s" % (index, address)
                    raise UnreachableError(
                        "%s is unreachable after %d s (%s): is it running?" % (where, timeout, e)
                    ) from None
                time.sleep(poll)
