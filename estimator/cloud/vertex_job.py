"""Vertex AI custom job configs from AI Platform Training's YAML files.

``custom_job_spec`` turns ``trainingInput``'s machines (master, workers,
parameter servers, evaluators) into a ``CustomJobSpec``: worker pool 0 is the
chief, 1 the workers, 2 the parameter servers, 3 the evaluators, the order in
which Vertex AI writes ``TF_CONFIG``. A tuning job wraps one
(``estimator.cloud.vertex_study``). Field names follow the ``aiplatform.v1``
discovery document; integers that the API carries as int64 are written as
strings. Command line: ``python -m estimator.vertex custom-job``.
"""

from __future__ import annotations

import shlex

from estimator.common.processes import TRAINER_MODULE as MODULE
from estimator.training import recipes
from estimator.tuning import spec as spec_lib

# Google's prebuilt TensorFlow 2.15 training containers (Python 3.10). Google's
# supported-frameworks list gives 2024-11-14 as their end of patches and support
# and 2025-11-14 as their end of availability: pass --image-uri with a container
# of your own (docs/cloud.md, "Vertex AI") if they can no longer be pulled.
PREBUILT_CPU_IMAGE = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest"
PREBUILT_GPU_IMAGE = "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-15.py310:latest"
PREBUILT_SUPPORT = "end of support 2024-11-14, end of availability 2025-11-14"

# AI Platform's legacy machine types and their Compute Engine equivalents
# (machine type, accelerator type, accelerator count), from the service's own
# table of equivalents. K80s are gone from Vertex AI: T4s take their place.
LEGACY_MACHINES = {
    "standard": ("n1-standard-4", None, 0),
    "large_model": ("n1-highmem-8", None, 0),
    "complex_model_s": ("n1-highcpu-8", None, 0),
    "complex_model_m": ("n1-highcpu-16", None, 0),
    "complex_model_l": ("n1-highcpu-32", None, 0),
    "standard_gpu": ("n1-standard-8", "NVIDIA_TESLA_T4", 1),
    "complex_model_m_gpu": ("n1-standard-16", "NVIDIA_TESLA_T4", 4),
    "complex_model_l_gpu": ("n1-standard-32", "NVIDIA_TESLA_T4", 8),
    "standard_p100": ("n1-standard-8", "NVIDIA_TESLA_P100", 1),
    "complex_model_m_p100": ("n1-standard-16", "NVIDIA_TESLA_P100", 4),
    "standard_v100": ("n1-standard-8", "NVIDIA_TESLA_V100", 1),
    "large_model_v100": ("n1-highmem-8", "NVIDIA_TESLA_V100", 1),
    "complex_model_m_v100": ("n1-standard-16", "NVIDIA_TESLA_V100", 4),
    "complex_model_l_v100": ("n1-standard-32", "NVIDIA_TESLA_V100", 8),
}
# trainingInput fields that describe machines; the rest are the legacy service's own.
POOLS = (
    ("master", "masterType", None, "masterConfig"),
    ("worker", "workerType", "workerCount", "workerConfig"),
    ("ps", "parameterServerType", "parameterServerCount", "parameterServerConfig"),
    ("evaluator", "evaluatorType", "evaluatorCount", "evaluatorConfig"),
)
KNOWN_FIELDS = {
    "scaleTier",
    "runtimeVersion",
    "pythonVersion",
    "region",
    "jobDir",
    "args",
    "packageUris",
    "pythonModule",
    "hyperparameters",
    "useChiefInTfConfig",
    "masterType",
    "masterConfig",
    "workerType",
    "workerCount",
    "workerConfig",
    "parameterServerType",
    "parameterServerCount",
    "parameterServerConfig",
    "evaluatorType",
    "evaluatorCount",
    "evaluatorConfig",
    "scheduling",
    "serviceAccount",
    "network",
}
SCALE_TIERS = {"BASIC": "n1-standard-4", "CUSTOM": None}


def _machine_spec(role: str, machine_type: str, config: dict) -> dict:
    if machine_type in LEGACY_MACHINES:
        new_type, accel, count = LEGACY_MACHINES[machine_type]
        replacement = "%s%s" % (new_type, " with %d x %s (acceleratorConfig)" % (count, accel) if accel else "")
        raise spec_lib.SpecError(
            "trainingInput.%sType %r is a legacy AI Platform machine type with no Vertex AI equivalent of that "
            "name: use %s, the Compute Engine equivalent."
            % ("parameterServer" if role == "ps" else role, machine_type, replacement)
        )
    spec = {"machineType": machine_type}
    accelerator = (config or {}).get("acceleratorConfig")
    if accelerator:
        if accelerator.get("type") in (None, "ACCELERATOR_TYPE_UNSPECIFIED") or int(accelerator.get("count", 0)) < 1:
            raise spec_lib.SpecError(
                "trainingInput.%sConfig.acceleratorConfig needs a type and a count >= 1, got %r." % (role, accelerator)
            )
        spec.update(acceleratorType=accelerator["type"], acceleratorCount=int(accelerator["count"]))
    return spec


def worker_pools(training_input: dict):
    """[(role, replicaCount, machineSpec)] in Vertex AI's pool order."""
    unknown = sorted(set(training_input) - KNOWN_FIELDS)
    if unknown:
        raise spec_lib.SpecError("trainingInput: unknown field %s." % unknown[0])
    tier = training_input.get("scaleTier", "BASIC" if "masterType" not in training_input else "CUSTOM")
    if tier not in SCALE_TIERS:
        raise spec_lib.SpecError(
            "trainingInput.scaleTier %r: only BASIC and CUSTOM (with masterType ...) map to "
            "Vertex AI; give the machines with scaleTier CUSTOM." % tier
        )
    if tier == "BASIC":
        return [("master", 1, {"machineType": SCALE_TIERS["BASIC"]})]
    pools = []
    for role, type_key, count_key, config_key in POOLS:
        machine_type = training_input.get(type_key)
        count = 1 if count_key is None else int(training_input.get(count_key, 0))
        if role == "master" and not machine_type:
            raise spec_lib.SpecError("trainingInput.masterType is required with scaleTier CUSTOM.")
        if count and not machine_type:
            raise spec_lib.SpecError("trainingInput.%s is %d but %s is missing." % (count_key, count, type_key))
        if machine_type and count:
            pools.append((role, count, _machine_spec(role, machine_type, training_input.get(config_key))))
    return pools


def job_args(trainer_args, training_input: dict) -> list:
    """The trainer's flags as the job's container gets them, checked as the trainer will check them there.

    ``@FILE`` arguments are read into the list, and so is a recipe given as a file (neither file travels
    with the job); a recipe of the package (``--recipe cpu_5min``) is passed on by name, which the
    container's package resolves. Flags the trainer refuses in a ps/worker cluster, whose workers the
    chief cannot time, are refused here, before the job is paid for.

    Raises:
      SpecError: naming the flag, where it came from, and the fix.
    """
    args = []
    for arg in trainer_args:
        if arg.startswith("@"):
            try:
                with open(arg[1:]) as f:
                    args.extend(shlex.split(f.read(), comments=True))
            except OSError as e:
                raise spec_lib.SpecError("%s: %s (a flag file of the trainer's)." % (arg, e.strerror)) from None
        else:
            args.append(arg)
    try:
        at, recipe = recipes.find(args)
        if at is not None and recipe not in recipes.names():  # a file: its flags go with the job
            args = args[:at] + recipes.read(recipe) + args[at + (2 if args[at] == recipes.FLAG else 1) :]
        seen = recipes.expand(args)  # what the trainer will parse
    except ValueError as e:
        raise spec_lib.SpecError(str(e)) from None
    cluster = [(count, role) for role, count, _ in worker_pools(training_input) if role in ("worker", "ps")]
    if cluster:
        where = " from --recipe %s" % recipe if recipe else ""
        refused = [
            ("--time-budget", "plans the steps of one process, and the chief cannot time its workers", "--train-steps"),
            ("--network auto", "chooses the network for a --time-budget", "--network airbench"),
        ]
        budget = any(a == "--time-budget" or a.startswith("--time-budget=") for a in seen)
        auto = any(a == "--network=auto" for a in seen) or any(
            a == "--network" and b == "auto" for a, b in zip(seen, seen[1:])
        )
        for (flag, why, instead), given in zip(refused, (budget, auto)):
            if given:
                raise spec_lib.SpecError(
                    "%s%s %s; this config's machines make a ps/worker cluster (%s): give the cluster %s, or a "
                    "config with a masterType alone (one machine)."
                    % (flag, where, why, ", ".join("%d %s" % c for c in cluster), instead)
                )
    return args


def scheduling(spot: bool = False, restart_job_on_worker_restart: bool = False, timeout_secs: float = None):
    """The ``Scheduling`` of a custom job, or None when every field keeps Vertex AI's default.

    ``spot``: run on Spot VMs (strategy SPOT): cheaper, and Compute Engine may take a VM back at any
    time. The trainer then gets SIGTERM, saves a checkpoint at the step it reached and exits 143;
    Vertex AI restarts the worker, and the same command resumes from that checkpoint in the same
    job dir (docs/cloud.md, "Spot VMs"). ``restart_job_on_worker_restart``: restart every worker
    when one restarts (for clusters that do not tolerate a worker leaving). ``timeout_secs``: the
    longest the job may run (Vertex AI's default is 7 days).
    """
    fields = {}
    if spot:
        fields["strategy"] = "SPOT"
    if restart_job_on_worker_restart:
        fields["restartJobOnWorkerRestart"] = True
    if timeout_secs:
        fields["timeout"] = "%ds" % int(round(timeout_secs))
    return fields or None


def custom_job_spec(
    training_input: dict,
    package_uri: str,
    trainer_args,
    base_output_dir: str = None,
    image_uri: str = None,
    schedule: dict = None,
) -> dict:
    """A ``CustomJobSpec`` for ``gcloud ai custom-jobs create --config``.

    Args:
      training_input: the ``trainingInput`` mapping of cmle_config.yaml (or hptuning_config.yaml).
      package_uri: the sdist on Cloud Storage (gs://...), for the prebuilt container.
      trainer_args: the trainer's flags.
      base_output_dir: gs:// directory; Vertex AI sets AIP_MODEL_DIR (and per trial dirs) under it.
      image_uri: a container of your own with the package installed: then a containerSpec
        running ``python -m estimator.cifar10_main`` instead of the prebuilt image.
      schedule: ``scheduling(...)``: Spot VMs, restarts, timeout.
    """
    pools = worker_pools(training_input)
    gpus = any(m.get("acceleratorCount") for _, _, m in pools)
    specs = []
    by_role = {role: (count, machine) for role, count, machine in pools}
    order = [role for role, _, _, _ in POOLS]
    for role in order[: 1 + max(order.index(role) for role in by_role)]:
        if role not in by_role:
            specs.append({})  # Vertex AI reads pools by position: an empty one keeps the places
            continue
        count, machine = by_role[role]
        pool = {"machineSpec": machine, "replicaCount": str(count)}
        if image_uri:
            pool["containerSpec"] = {
                "imageUri": image_uri,
                "command": ["python", "-m", MODULE],
                "args": list(trainer_args),
            }
        else:
            if not package_uri or not package_uri.startswith("gs://"):
                raise spec_lib.SpecError(
                    "--package-uri %r must be a gs:// URI of the sdist (python setup.py sdist), "
                    "or pass --image-uri for a container of your own." % package_uri
                )
            pool["pythonPackageSpec"] = {
                "executorImageUri": PREBUILT_GPU_IMAGE if gpus else PREBUILT_CPU_IMAGE,
                "packageUris": [package_uri],
                "pythonModule": MODULE,
                "args": list(trainer_args),
            }
        specs.append(pool)
    job = {"workerPoolSpecs": specs}
    if base_output_dir:
        job["baseOutputDirectory"] = {"outputUriPrefix": base_output_dir}
    if schedule:
        job["scheduling"] = dict(schedule)
    return job
