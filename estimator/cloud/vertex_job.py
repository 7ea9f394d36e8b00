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

import contextlib
import difflib
import io
import re
from dataclasses import dataclass

from estimator.common.cluster import Cluster
from estimator.common.options import Network
from estimator.common.processes import TRAINER_MODULE as MODULE
from estimator.training import flags, recipes
from estimator.tuning import spec as spec_lib

# The package route (an executor image installing an sdist), retired in 0.6.0: its flags and fields are refused.
RETIRED_PACKAGE_ROUTE = (
    "the package route was retired in 0.6.0 (Google's TensorFlow 2.15 executor images are gone, and an image of "
    "your own is the container route with one image more): build the Dockerfile's image and give --image-uri"
)

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
    "complex_model_l_gpu": ("n1-standard-32", "NVIDIA_TESLA_T4", 4),  # an N1 machine takes at most 4 T4s
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
# trainingInput's fields, each written into the Vertex AI config or refused (never dropped): machines and the
# study (above and in vertex_study), and these.
JOB_FIELDS = (
    "scaleTier",
    "region",
    "jobDir",
    "args",
    "packageUris",
    "pythonModule",
    "hyperparameters",
    "useChiefInTfConfig",
    "scheduling",
    "serviceAccount",
    "network",
    # Refused with the reason (legacy AI Platform's runtimes; Vertex AI runs the container).
    "runtimeVersion",
    "pythonVersion",
)
MACHINE_FIELDS = tuple(key for pool in POOLS for key in pool[1:] if key)
# A pool's config (ml.v1 ReplicaConfig): each field written into its worker pool spec, or refused.
POOL_CONFIG_FIELDS = (
    "acceleratorConfig",
    "imageUri",
    "containerCommand",
    "containerArgs",
    "diskConfig",
    "tpuTfVersion",
)
DISK_FIELDS = ("bootDiskType", "bootDiskSizeGb")
# The GPUs of aiplatform.v1's AcceleratorType (tests/test_vertex.py holds this to Google's own enum); TPUs run
# no Estimator tower of this package. Those the enum marks deprecated are refused with what replaces them.
RETIRED_GPUS = {"NVIDIA_TESLA_K80": "NVIDIA_TESLA_T4"}  # end of support: cloud.google.com/compute/docs/eol/k80-eol
GPU_TYPES = (
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_L4",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
    "NVIDIA_GB200",
    "NVIDIA_RTX_PRO_6000",
)
SCALE_TIERS = {"BASIC": "n1-standard-4", "CUSTOM": None}
# The legacy tiers with one machine, and the legacy machine type that is their Vertex AI equivalent.
LEGACY_TIERS = {"BASIC_GPU": "standard_gpu"}
# trainingInput.scheduling (ml.v1) to Vertex AI's Scheduling (aiplatform.v1). maxWaitTime has no equivalent:
# Vertex AI's maxWaitDuration applies only to the FLEX_START strategy.
LEGACY_SCHEDULING = {"maxRunningTime": "timeout"}
TENSORBOARD_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/tensorboards/[^/]+$")
NETWORK_NAME = re.compile(r"^projects/[^/]+/global/networks/[^/]+$")


@dataclass(frozen=True)
class JobOptions:
    """What a custom job (or each trial of a tuning job) runs on and writes to, beside its machines."""

    image_uri: str = None  # the package's container (Dockerfile)
    base_output_dir: str = None
    schedule: dict = None
    service_account: str = None
    network: str = None
    tensorboard: str = None
    region: str = None


def _one(name: str, flag_value, yaml_value, yaml_name: str):
    """A setting given by a flag, by the YAML, or by both alike; both, different: refused."""
    if flag_value is not None and yaml_value is not None and flag_value != yaml_value:
        raise spec_lib.SpecError(
            "%s %r and trainingInput.%s %r disagree: give one of them." % (name, flag_value, yaml_name, yaml_value)
        )
    return flag_value if flag_value is not None else yaml_value


def _refuse_legacy_fields(training_input: dict) -> None:
    for legacy in ("runtimeVersion", "pythonVersion"):
        if legacy in training_input:
            raise spec_lib.SpecError(
                "trainingInput.%s %r is legacy AI Platform's runtime: remove it." % (legacy, training_input[legacy])
            )
    if training_input.get("useChiefInTfConfig", True) is not True:
        raise spec_lib.SpecError(
            "trainingInput.useChiefInTfConfig false: Vertex AI always names worker pool 0 'chief': remove it."
        )
    module = training_input.get("pythonModule", MODULE)
    if module != MODULE:
        raise spec_lib.SpecError("trainingInput.pythonModule %r: the trainer is %s." % (module, MODULE))


def _image(training_input: dict, given: dict) -> str:
    """The container that runs the trainer."""
    if "packageUris" in training_input:
        raise spec_lib.SpecError("trainingInput.packageUris: %s." % RETIRED_PACKAGE_ROUTE)
    if not given.get("image_uri"):
        raise spec_lib.SpecError("name the container that runs the trainer: --image-uri (docs/cloud.md builds it).")
    return given["image_uri"]


def _schedule(training_input: dict, given: dict):
    """The flags' ``Scheduling`` with trainingInput.scheduling's fields in Vertex AI's names."""
    schedule = dict(given.get("schedule") or {})
    legacy = dict(training_input.get("scheduling") or {})
    for key in sorted(set(legacy) - set(LEGACY_SCHEDULING)):
        raise spec_lib.SpecError("trainingInput.scheduling.%s has no Vertex AI equivalent: remove it." % key)
    if "maxRunningTime" in legacy:
        schedule["timeout"] = _one(
            "--timeout", schedule.get("timeout"), legacy["maxRunningTime"], "scheduling.maxRunningTime"
        )
    return schedule or None


def _identity(training_input: dict, given: dict):
    """``(service account, network, TensorBoard instance)``, each checked for the form Vertex AI takes."""
    account = _one(
        "--service-account", given.get("service_account"), training_input.get("serviceAccount"), "serviceAccount"
    )
    tensorboard = given.get("tensorboard")
    if tensorboard and not TENSORBOARD_NAME.match(tensorboard):
        raise spec_lib.SpecError(
            "--tensorboard %r must name a Vertex AI TensorBoard instance (its resource name)." % tensorboard
        )
    if tensorboard and not account:
        raise spec_lib.SpecError("--tensorboard needs --service-account, which uploads the logs (docs/cloud.md).")
    network = _one("--network", given.get("network"), training_input.get("network"), "network")
    if network and not NETWORK_NAME.match(network):
        raise spec_lib.SpecError("network %r must be projects/PROJECT_NUMBER/global/networks/NAME." % network)
    return account, network, tensorboard


def job_options(training_input: dict, **given) -> JobOptions:
    """The job's software, outputs, identity and schedule from the command's flags (``given``, JobOptions'
    fields) and trainingInput's own fields, each written or refused.

    Raises:
      SpecError: naming the field or flag and the fix.
    """
    _refuse_legacy_fields(training_input)
    master_image = (training_input.get("masterConfig") or {}).get("imageUri")
    given = dict(given, image_uri=_one("--image-uri", given.get("image_uri"), master_image, "masterConfig.imageUri"))
    image = _image(training_input, given)
    account, network, tensorboard = _identity(training_input, given)
    base_output_dir = _one("--base-output-dir", given.get("base_output_dir"), training_input.get("jobDir"), "jobDir")
    if tensorboard and not base_output_dir:
        raise spec_lib.SpecError("--tensorboard needs --base-output-dir gs://BUCKET/jobs/NAME, where its logs are.")
    return JobOptions(
        image_uri=image,
        base_output_dir=base_output_dir,
        schedule=_schedule(training_input, given),
        service_account=account,
        network=network,
        tensorboard=tensorboard,
        region=_one("--region", given.get("region"), training_input.get("region"), "region") or "us-central1",
    )


def _machine_spec(role: str, machine_type: str, config: dict) -> dict:
    if machine_type in LEGACY_MACHINES:
        new_type, accel, count = LEGACY_MACHINES[machine_type]
        replacement = "%s%s" % (new_type, " with %d x %s (acceleratorConfig)" % (count, accel) if accel else "")
        legacy = "trainingInput.%sType %r" % (_config_name(role), machine_type)
        raise spec_lib.SpecError("%s is a legacy AI Platform machine type: use %s." % (legacy, replacement))
    spec = {"machineType": machine_type}
    accelerator = (config or {}).get("acceleratorConfig")
    if accelerator:
        where = "trainingInput.%sConfig.acceleratorConfig" % _config_name(role)
        kind = accelerator.get("type")
        if kind in (None, "ACCELERATOR_TYPE_UNSPECIFIED") or int(accelerator.get("count", 0)) < 1:
            raise spec_lib.SpecError("%s needs a type and a count >= 1, got %r." % (where, accelerator))
        if kind in RETIRED_GPUS:
            raise spec_lib.SpecError(
                "%s.type %s has reached its end of support: use %s." % (where, kind, RETIRED_GPUS[kind])
            )
        if kind not in GPU_TYPES:
            model = str(kind).rsplit("_", 1)[-1]  # NVIDIA_T4: the T4 is NVIDIA_TESLA_T4
            near = [t for t in GPU_TYPES if t.endswith("_" + model)] or difflib.get_close_matches(
                str(kind), GPU_TYPES, 1
            )
            hint = "give %s" % near[0] if near else "give one of %s" % ", ".join(GPU_TYPES)
            raise spec_lib.SpecError("%s.type %r is not one of Vertex AI's GPUs: %s." % (where, kind, hint))
        spec.update(acceleratorType=kind, acceleratorCount=int(accelerator["count"]))
    return spec


def _config_name(role: str) -> str:
    return "parameterServer" if role == "ps" else role


def pool_software(training_input: dict, role: str) -> dict:
    """What a pool's config (masterConfig ... evaluatorConfig) adds to its worker pool spec: ``{"image_uri":
    the pool's own image, "args": arguments after the job's, "diskSpec": Vertex AI's boot disk}``, each only
    where given; a field with no Vertex AI equivalent for the trainer is refused.

    Raises:
      SpecError: naming the field and the fix.
    """
    config = training_input.get(_config_name(role) + "Config") or {}
    where = "trainingInput.%sConfig" % _config_name(role)
    unknown = sorted(set(config) - set(POOL_CONFIG_FIELDS))
    if unknown:
        raise spec_lib.SpecError("%s: unknown field %s." % (where, unknown[0]))
    if "tpuTfVersion" in config:
        raise spec_lib.SpecError("%s.tpuTfVersion: the trainer's towers are GPUs or CPUs, not TPUs: remove it." % where)
    command = config.get("containerCommand")
    if command is not None and list(command) != ["python", "-m", MODULE]:
        raise spec_lib.SpecError("%s.containerCommand %r: every pool runs the trainer: remove it." % (where, command))
    out = {}
    if config.get("imageUri"):
        out["image_uri"] = config["imageUri"]
    if config.get("containerArgs"):
        out["args"] = [str(a) for a in config["containerArgs"]]
    disk = config.get("diskConfig")
    if disk:
        bad = sorted(set(disk) - set(DISK_FIELDS))
        if bad:
            raise spec_lib.SpecError("%s.diskConfig: unknown field %s (it takes %s)." % (where, bad[0], DISK_FIELDS))
        out["diskSpec"] = {k: (int(v) if k == "bootDiskSizeGb" else v) for k, v in disk.items()}
    return out


def cluster_note(pools):
    """One line for a ps/worker cluster with no evaluator: on Vertex AI pool 0 is a chief, which only trains
    (TensorFlow's train_and_evaluate), so nothing validates until the end; None otherwise."""
    roles = {role for role, _, _ in pools}
    if roles & {"worker", "ps"} and "evaluator" not in roles:
        return (
            "this cluster has no evaluator: on Vertex AI worker pool 0 is a chief, which only trains, so the job "
            "validates once, at its end (one point in TensorBoard, export/best from it, one tuning report): add "
            "evaluatorType and evaluatorCount: 1 (cmle_config.yaml does) to validate after each checkpoint"
        )
    return None


def worker_pools(training_input: dict):
    """[(role, replicaCount, machineSpec)] in Vertex AI's pool order.

    Vertex AI reads the pools by position (chief, workers, parameter servers, evaluators), and gcloud's
    check of a ``--config`` file refuses an empty pool (every entry needs its pythonPackageSpec or
    containerSpec): machines that would leave a gap before a later pool are refused.
    """
    unknown = sorted(set(training_input) - set(JOB_FIELDS) - set(MACHINE_FIELDS))
    if unknown:
        raise spec_lib.SpecError("trainingInput: unknown field %s." % unknown[0])
    tier = training_input.get("scaleTier", "BASIC" if "masterType" not in training_input else "CUSTOM")
    if tier in LEGACY_TIERS:
        machine, gpu, count = LEGACY_MACHINES[LEGACY_TIERS[tier]]
        fields = "masterType %s and %d %s" % (machine, count, gpu)
        raise spec_lib.SpecError("trainingInput.scaleTier %s: give gpu_config.yaml's fields, with %s." % (tier, fields))
    if tier not in SCALE_TIERS:
        raise spec_lib.SpecError(
            "trainingInput.scaleTier %r: give the machines with scaleTier CUSTOM (or BASIC)." % tier
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
        if role == "evaluator" and count > 1:
            raise spec_lib.SpecError("trainingInput.evaluatorCount %d: TensorFlow runs one evaluator: give 1." % count)
        if machine_type and count:
            pools.append((role, count, _machine_spec(role, machine_type, training_input.get(config_key))))
    order = [role for role, _, _, _ in POOLS]
    present = [order.index(role) for role, _, _ in pools]
    missing = [order[i] for i in range(max(present)) if i not in present]
    if missing:
        later = "parameter servers" if order[max(present)] == "ps" else "an evaluator"
        names = " and no ".join("workers" if m == "worker" else "parameter servers" for m in missing)
        raise spec_lib.SpecError("trainingInput has %s but no %s: give them, or drop the later pools." % (later, names))
    return pools


def job_cluster(pools, role: str = "chief") -> Cluster:
    """The ``Cluster`` a replica of ROLE sees in this job (``TF_CONFIG`` as Vertex AI sets it, names only):
    one machine alone trains as a single process."""
    counts = {r: n for r, n, _ in pools}
    if set(counts) == {"master"}:
        return Cluster()
    spec = {
        "chief" if r == "master" else r: ["replica-%d:2222" % i for i in range(n)]
        for r, n in counts.items()
        if r != "evaluator"
    }
    return Cluster(spec=spec, task_type="chief" if role == "master" else role, task_index=0)


def trainer_values(args) -> dict:
    """``flags.given_values``: the trainer's flags in ARGS as its own parser reads them.

    Raises:
      SpecError: the trainer's own message, for a flag it would refuse.
    """
    with _trainer_refusal():
        return flags.given_values(list(args))


@contextlib.contextmanager
def _trainer_refusal():
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            yield
    except SystemExit:
        line = next((x for x in errors.getvalue().splitlines() if "error: " in x), errors.getvalue().strip())
        raise spec_lib.SpecError("the trainer would refuse its flags: " + line.split("error: ", 1)[-1]) from None


def parse_trainer_flags(args, cluster: Cluster, gpus_visible: int):
    """The trainer's own parsing and checks of ARGS, for a replica in CLUSTER with GPUS_VISIBLE GPUs.

    Raises:
      SpecError: the trainer's own message.
    """
    with _trainer_refusal():
        parsed = flags.build_parser().parse_args(list(args))
    try:
        flags.validate(parsed, cluster, gpus_visible)
    except ValueError as e:
        raise spec_lib.SpecError("the trainer would refuse its flags in this job: %s" % e) from None
    return parsed


def job_args(trainer_args, training_input: dict, base_output_dir: str = None) -> list:
    """The trainer's flags as the job's container gets them, checked as the trainer will check them there.

    trainingInput.args come first; ``@FILE`` arguments are read into the list, and so is a recipe given as
    a file (neither file travels with the job); a recipe of the package (``--recipe cpu_5min``) is passed on
    by name, which the container's package resolves. The flags are then parsed and checked by the trainer's
    own parser as each training replica of this job will (its cluster, its GPUs), so that a job that would
    stop at start-up is refused before it is paid for; so is a job with no place for its outputs, and
    directories of this machine, which the job's machines cannot see.

    Raises:
      SpecError: naming the flag, where it came from, and the fix.
    """
    with _trainer_refusal():
        args = flags.read_flag_files(list(training_input.get("args") or ()) + list(trainer_args))
    try:
        at, recipe = recipes.find(args)
        if at is not None and recipe not in recipes.names():  # a file: its flags go with the job
            args = args[:at] + recipes.read(recipe) + args[at + (2 if args[at] == recipes.FLAG else 1) :]
        seen = recipes.expand(args)  # what the trainer will parse
    except ValueError as e:
        raise spec_lib.SpecError(str(e)) from None
    pools = worker_pools(training_input)
    given = trainer_values(seen)
    _check_cluster_flags(given, pools, recipe)
    _check_output_places(given, base_output_dir)
    for role, _, machine in pools:
        if role != "ps":
            own = pool_software(training_input, role).get("args", [])
            parse_trainer_flags(seen + own, job_cluster(pools, role), int(machine.get("acceleratorCount", 0)))
    return args


def _check_cluster_flags(given: dict, pools: list, recipe) -> None:
    """Refuses the flags a ps/worker cluster (``pools`` with workers or parameter servers) cannot honour:
    ``--time-budget`` and ``--network auto`` (``recipe``: the recipe that gave them, if one did)."""
    cluster = [(count, role) for role, count, _ in pools if role in ("worker", "ps")]
    if not cluster:
        return
    where = " from --recipe %s" % recipe if recipe else ""
    refused = [
        ("--time-budget", "plans the steps of one process, and the chief cannot time its workers", "--train-steps"),
        ("--network auto", "chooses the network for a --time-budget", "--network airbench"),
    ]
    budget, auto = given.get("time_budget") is not None, given.get("network") == Network.AUTO
    for (flag, why, instead), asked in zip(refused, (budget, auto)):
        if asked:
            machines = ", ".join("%d %s" % c for c in cluster)
            raise spec_lib.SpecError(
                "%s%s %s, and this is a ps/worker cluster (%s): give %s." % (flag, where, why, machines, instead)
            )


def _check_output_places(given: dict, base_output_dir) -> None:
    """Refuses directories of this machine, which the job's machines cannot see, and a job with no place
    for its outputs (no ``--job-dir`` and no ``base_output_dir`` for Vertex AI's ``AIP_*`` directories)."""
    for flag in ("--data-dir", "--job-dir"):
        value = given.get(flag[2:].replace("-", "_"))
        if value is not None and not value.startswith(("gs://", "/gcs/")):
            raise spec_lib.SpecError(
                "%s %s is a directory of this machine, unseen by the job's: give a gs:// path." % (flag, value)
            )
    if given.get("job_dir") is None and not base_output_dir:
        raise spec_lib.SpecError("this job has no place for its outputs: give --base-output-dir gs://BUCKET/jobs/NAME.")


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


def custom_job_spec(training_input: dict, trainer_args, options: JobOptions) -> dict:
    """A ``CustomJobSpec`` for ``gcloud ai custom-jobs create --config``.

    Args:
      training_input: the ``trainingInput`` mapping of cmle_config.yaml (or hptuning_config.yaml).
      trainer_args: the trainer's flags (``job_args``).
      options: ``job_options``: the container, outputs, schedule, identity.
    """
    specs = []
    for role, count, machine in worker_pools(training_input):
        own = pool_software(training_input, role)
        pool = {"machineSpec": machine, "replicaCount": str(count)}
        if "diskSpec" in own:
            pool["diskSpec"] = own["diskSpec"]
        args = list(trainer_args) + own.get("args", [])
        image = own.get("image_uri", options.image_uri)
        pool["containerSpec"] = {"imageUri": image, "command": ["python", "-m", MODULE], "args": args}
        specs.append(pool)
    job = {"workerPoolSpecs": specs}
    if options.base_output_dir:
        job["baseOutputDirectory"] = {"outputUriPrefix": options.base_output_dir}
    if options.schedule:
        job["scheduling"] = dict(options.schedule)
    for key, value in (
        ("serviceAccount", options.service_account),
        ("network", options.network),
        ("tensorboard", options.tensorboard),
    ):
        if value:
            job[key] = value
    return job


def quota_needs(config: dict, region: str) -> str:
    """What the project's Vertex AI training quota must allow in ``region`` for the job ``config`` (a custom job, or
    a tuning job's trials at their parallelism): its vCPUs and GPUs per family, named as the quotas are."""
    job = config.get("trialJobSpec", config)
    parallel = int(config.get("parallelTrialCount", 1))
    cpus, gpus = {}, {}
    for pool in job["workerPoolSpecs"]:
        machine, count = pool.get("machineSpec", {}), parallel * int(pool.get("replicaCount", 1))
        if not machine:
            continue  # a gap before a later pool
        series, size = machine["machineType"].split("-")[0], machine["machineType"].rsplit("-", 1)[-1]
        cpus[series] = cpus.get(series, 0) + count * int(size if size.isdigit() else 0)
        if machine.get("acceleratorType"):
            gpu = machine["acceleratorType"].replace("NVIDIA_TESLA_", "NVIDIA_").lower()
            gpus[gpu] = gpus.get(gpu, 0) + count * int(machine.get("acceleratorCount", 1))
    parts = ["%d %s vCPUs" % (n, series.upper()) for series, n in sorted(cpus.items())]
    parts += ["%d custom_model_training_%s_gpus" % (n, gpu) for gpu, n in sorted(gpus.items())]
    return "Quota it needs in %s: %s (docs/cloud.md, Quota)." % (region, ", ".join(parts))
