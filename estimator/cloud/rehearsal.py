"""A dress rehearsal of a Vertex AI job on this machine: ``python -m estimator.vertex local-run JOB.yaml``.

Runs the ``CustomJobSpec`` (or one trial of the ``HyperparameterTuningJob``) that ``estimator.vertex``
wrote, as Vertex AI runs it: each worker pool's replicas as processes on 127.0.0.1 (``LocalCluster``), each
with its pool's command and arguments as written, a tuning trial's parameters appended as ``--name=value``,
and the environment Vertex AI documents: ``TF_CONFIG`` (worker pool 0 named ``chief``, even alone),
``CLUSTER_SPEC`` (pools ``workerpool0``..``3``), ``CLOUD_ML_TRIAL_ID``, and ``AIP_MODEL_DIR``,
``AIP_CHECKPOINT_DIR``, ``AIP_TENSORBOARD_LOG_DIR`` under ``baseOutputDirectory`` (``<trial id>/`` in a
trial). What cannot run here is mapped with explicit flags: the image to the Python that stands for its
``python`` (``--image URI=PYTHON``), or the image itself run by a container engine (``--engine docker``),
and ``gs://`` paths to local directories (``--map gs://B/P=DIR``; TensorFlow's own Cloud Storage client,
which the Estimator uses, has no endpoint setting to point at an emulator). A job that gcloud or Vertex AI
would refuse is refused here first. The result: the exit code of the chief and the metric its trainer
reported through cloudml-hypertune.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from dataclasses import dataclass

from estimator.cloud import vertex_job
from estimator.cloud.local_cluster import ClusterError, LocalCluster
from estimator.tuning import spec as spec_lib

# Worker pools by position, as Vertex AI reads them; the names TF_CONFIG and CLUSTER_SPEC give them.
POOL_ROLES = ("chief", "worker", "ps", "evaluator")
METRIC_FILE = "output.metrics"
# Vertex AI's directories for the trainer, under the job's base output directory.
OUTPUT_VARIABLES = ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR")
# Every variable the rehearsal sets for a replica as Vertex AI does: what a container gets from the engine.
TASK_VARIABLES = ("TF_CONFIG", "CLUSTER_SPEC", "CLOUD_ML_TRIAL_ID", "CLOUD_ML_HP_METRIC_FILE", *OUTPUT_VARIABLES)


@dataclass
class Rehearsal:
    """What a rehearsal ran and what its chief reported."""

    exit_code: int
    trial: str
    outputs: dict  # AIP_* variable -> the local directory it pointed to
    metric: dict  # the chief's last cloudml-hypertune report ({} if none)
    log: str  # the chief's output
    reports: list = ()  # every cloudml-hypertune report of the chief, in order


def check_pools(pools) -> None:
    """gcloud's and Vertex AI's own checks of ``workerPoolSpecs``.

    Raises:
      SpecError: naming the pool and what is wrong.
    """
    if not isinstance(pools, list) or not pools:
        raise spec_lib.SpecError("workerPoolSpecs must list at least worker pool 0 (the chief).")
    if len(pools) > len(POOL_ROLES):
        raise spec_lib.SpecError("workerPoolSpecs has %d pools: Vertex AI reads at most 4." % len(pools))
    for i, pool in enumerate(pools):
        software = [k for k in ("pythonPackageSpec", "containerSpec") if k in (pool or {})]
        if len(software) != 1:
            # gcloud: command_lib/ai/custom_jobs/validation.py (_ValidateWorkerPoolSpecsFromConfig).
            raise spec_lib.SpecError(
                "workerPoolSpecs[%d] needs exactly one of pythonPackageSpec and containerSpec (%s)."
                % (i, "both" if software else "an empty pool")
            )
        if software == ["pythonPackageSpec"]:
            raise spec_lib.SpecError(
                "workerPoolSpecs[%d].pythonPackageSpec: %s." % (i, vertex_job.RETIRED_PACKAGE_ROUTE)
            )
        if not (pool.get("machineSpec") or {}).get("machineType"):
            raise spec_lib.SpecError("workerPoolSpecs[%d].machineSpec.machineType is required." % i)
        if int(pool.get("replicaCount", 1)) < 1:
            raise spec_lib.SpecError("workerPoolSpecs[%d].replicaCount must be at least 1." % i)
    if int(pools[0].get("replicaCount", 1)) != 1:
        raise spec_lib.SpecError("workerPoolSpecs[0] is the chief: its replicaCount must be 1.")


def default_parameters(study: dict) -> dict:
    """A trial's parameters when none are given: the middle of each range (geometric on a log scale), the
    first of each list, as strings the way Vertex AI passes them."""
    values = {}
    for p in study.get("parameters", []):
        if "doubleValueSpec" in p or "integerValueSpec" in p:
            spec = p.get("doubleValueSpec") or p["integerValueSpec"]
            lo, hi = float(spec["minValue"]), float(spec["maxValue"])
            log = p.get("scaleType") in spec_lib.LOG_SCALES
            value = math.sqrt(lo * hi) if log else (lo + hi) / 2
            values[p["parameterId"]] = str(int(round(value))) if "integerValueSpec" in p else "%.6g" % value
        else:
            spec = p.get("discreteValueSpec") or p["categoricalValueSpec"]
            values[p["parameterId"]] = str(spec["values"][0])
    return values


def mapped(value: str, mapping: dict, required: bool = True) -> str:
    """VALUE with a mapped gs:// prefix replaced by its local directory (the longest prefix wins); an unmapped
    gs:// path is kept unless ``required``.

    Raises:
      SpecError: a gs:// path that no --map covers, when ``required``.
    """
    if "gs://" not in value:
        return value
    head, _, uri = value.partition("gs://")
    uri = "gs://" + uri
    for prefix in sorted(mapping, key=len, reverse=True):
        if uri == prefix or uri.startswith(prefix.rstrip("/") + "/"):
            return head + mapping[prefix].rstrip("/") + uri[len(prefix.rstrip("/")) :]
    if not required:
        return value
    bucket = "/".join(uri.split("/")[:3])
    raise spec_lib.SpecError(
        "%s is on Cloud Storage: map it to a directory of this machine: --map %s=DIR." % (uri, bucket)
    )


def _command(pool: dict, images: dict, mapping: dict, trial_args, engine=None, mounts=()) -> list:
    """A replica's command line as Vertex AI runs it: with the image's ``python`` standing for the image, or
    in the image itself under ENGINE (``_in_container``)."""
    spec, image = pool["containerSpec"], pool["containerSpec"]["imageUri"]
    command = list(spec.get("command") or [])
    if not command:
        raise spec_lib.SpecError(
            "containerSpec of %s has no command: the image's ENTRYPOINT would run; write the command." % image
        )
    args = [mapped(a, mapping) for a in list(spec.get("args") or []) + list(trial_args)]
    if image in images:
        if command[0] == "python":
            command[0] = images[image]
        return command + args
    if engine:
        gpus = int((pool.get("machineSpec") or {}).get("acceleratorCount", 0))
        return _in_container(engine, image, command, mounts, gpus) + args
    raise spec_lib.SpecError(
        "the image %s is not mapped: name the Python for it: --image %s=PYTHON, or --engine." % (image, image)
    )


def _in_container(engine: str, image: str, command, mounts, gpus: int = 0) -> list:
    """``ENGINE run`` of IMAGE as Vertex AI runs a ``containerSpec``: its command in place of the image's
    ENTRYPOINT, the host's network (the cluster's addresses are on 127.0.0.1), the variables of
    ``TASK_VARIABLES`` by name (the engine takes their values from its own environment, which the cluster sets
    for each task), MOUNTS (the mapped directories and the rehearsal's own) at their own paths, and the pool's
    GPUS (Docker's ``--gpus``; Podman's CDI devices, from the NVIDIA Container Toolkit)."""
    argv = [engine, "run", "--rm", "--network", "host", "--entrypoint", command[0]]
    if gpus and os.path.basename(engine) == "podman":
        for index in range(gpus):
            argv += ["--device", "nvidia.com/gpu=%d" % index]
    elif gpus:
        argv += ["--gpus", str(gpus)]
    for name in TASK_VARIABLES:
        argv += ["--env", name]
    for path in mounts:
        argv += ["--volume", "%s:%s" % (path, path)]
    return argv + [image] + command[1:]


def _trial(config: dict, trial: str, parameters) -> tuple:
    """``(trial id, arguments Vertex AI appends)`` of a tuning job's trial; ``(None, [])`` for a custom job."""
    if "trialJobSpec" not in config:
        return None, []
    values = dict(default_parameters(config["studySpec"]), **(parameters or {}))
    known = {p["parameterId"] for p in config["studySpec"].get("parameters", [])}
    unknown = sorted(set(values) - known)
    if unknown:
        raise spec_lib.SpecError("--param %s: the study has no such parameter (%s)." % (unknown[0], sorted(known)))
    return str(trial), ["--%s=%s" % kv for kv in values.items()]


def _outputs(job: dict, mapping: dict, trial_id) -> dict:
    """Vertex AI's AIP_* directories under the job's base output directory (a trial's under its id)."""
    base = (job.get("baseOutputDirectory") or {}).get("outputUriPrefix")
    if not base:
        return {}
    root = mapped(base, mapping).rstrip("/") + ("/" + trial_id if trial_id else "")
    return dict(zip(OUTPUT_VARIABLES, (root + "/model/", root + "/checkpoints/", root + "/logs/")))


def _task_environment(cluster: LocalCluster, counts: dict, outputs: dict, trial_id, work_dir):
    """Each replica's environment as Vertex AI sets it (TF_CONFIG comes from LocalCluster)."""
    names = dict(zip(POOL_ROLES, ("workerpool0", "workerpool1", "workerpool2", "workerpool3")))
    spec = {names[role]: addresses for role, addresses in cluster.spec.items()}
    if "evaluator" in counts:
        spec["workerpool3"] = ["127.0.0.1:0"]  # listed in CLUSTER_SPEC (not in TF_CONFIG); it serves nothing

    def task_env(role, index):
        env = dict(outputs, CLUSTER_SPEC=json.dumps({"cluster": spec, "task": {"type": names[role], "index": index}}))
        env["CLOUD_ML_HP_METRIC_FILE"] = os.path.join(work_dir, "%s-%d" % (role, index), METRIC_FILE)
        if trial_id:
            env["CLOUD_ML_TRIAL_ID"] = trial_id
        return env

    return task_env


def rehearse(
    config: dict,
    images: dict,
    mapping: dict,
    work_dir: str,
    trial: str = "1",
    parameters=None,
    out=sys.stdout,
    timeout: float = 3600,
    engine=None,
) -> Rehearsal:
    """Runs the job (or one trial of the tuning job) CONFIG as Vertex AI would; see the module's docstring.

    Args:
      config: a CustomJobSpec, or a HyperparameterTuningJob (its trialJobSpec runs, as trial TRIAL).
      images: image URI -> the Python standing for it.
      mapping: gs:// prefix -> local directory.
      work_dir: the rehearsal's own files (each replica's hypertune metrics).
      parameters: a trial's {parameterId: value}; default ``default_parameters``.
      engine: a container engine (docker, podman) that runs the images IMAGES does not name.

    Raises:
      SpecError: what gcloud or Vertex AI would refuse, or what is not mapped.
    """
    job = config.get("trialJobSpec", config)
    pools = job.get("workerPoolSpecs")
    check_pools(pools)
    if engine and not shutil.which(engine):
        raise spec_lib.SpecError("--engine %s: no such command here: install it, or give --image URI=PYTHON." % engine)
    # Absolute, as the replicas see them: an installed package runs from the rehearsal's directory, a container
    # mounts them at their own paths.
    mapping = {prefix: os.path.abspath(path) for prefix, path in mapping.items()}
    work_dir = os.path.abspath(work_dir)
    trial_id, trial_args = _trial(config, trial, parameters)
    mounts = sorted(set(mapping.values()) | {work_dir})
    roles = dict(zip(POOL_ROLES, pools))
    commands = {role: _command(pool, images, mapping, trial_args, engine, mounts) for role, pool in roles.items()}
    counts = {role: int(pool.get("replicaCount", 1)) for role, pool in roles.items()}
    outputs = _outputs(job, mapping, trial_id)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AIP_") and k not in TASK_VARIABLES}
    cluster = LocalCluster(
        [],
        workers=counts.get("worker", 0),
        ps=counts.get("ps", 0),
        evaluator="evaluator" in counts,
        chief_role="chief",
        trial=trial_id,
        env=environ,
        out=out,
        commands=commands,
    )
    cluster.task_env = _task_environment(cluster, counts, outputs, trial_id, work_dir)
    cluster.ends_with_chief = True  # as Vertex AI ends a job with its primary replica
    code, reports = _run_replicas(cluster, work_dir, timeout)
    return Rehearsal(code, trial_id, outputs, reports[-1] if reports else {}, cluster.task("chief").log(), reports)


def _run_replicas(cluster: LocalCluster, work_dir: str, timeout: float):
    """``(the chief's exit code, every metric it reported through cloudml-hypertune)`` once the replicas ran
    to their end (or ``timeout`` stopped them)."""
    os.makedirs(work_dir, exist_ok=True)
    cluster.start()
    try:
        code = cluster.wait(timeout=timeout)
    except ClusterError as e:
        print("error: %s" % e, file=sys.stderr, flush=True)
        code = cluster.task("chief").process.returncode or 1
    metrics = os.path.join(work_dir, "chief-0", METRIC_FILE)
    lines = open(metrics).read().splitlines() if os.path.exists(metrics) else []
    return code, [json.loads(line) for line in lines if line.strip()]
