"""Command line: Vertex AI job configs from the YAML files of AI Platform Training, and their rehearsal.

    python -m estimator.vertex custom-job --config cmle_config.yaml --image-uri IMAGE \\
        --base-output-dir gs://B/jobs/J --output job.yaml [--region R] [--spot] ... -- <trainer flags>
    python -m estimator.vertex hp-tuning-job --config hptuning_config.yaml --image-uri IMAGE \\
        --base-output-dir gs://B/studies/S --output hp.yaml [...] -- <trainer flags>
    python -m estimator.vertex local-run job.yaml {--image IMAGE=.venv/bin/python | --engine docker} \\
        --map gs://B=work/bucket [--trial 1 --param learning-rate=0.1]
    python -m estimator.vertex best-args hp.yaml [--output best.args]

Writes the YAML that ``gcloud ai custom-jobs create --config`` (a ``CustomJobSpec``) or ``gcloud ai
hp-tuning-jobs create --config`` (a ``HyperparameterTuningJob``) takes, then prints the exact gcloud
command; ``local-run`` runs a written config on this machine as Vertex AI would
(``estimator.cloud.rehearsal``); ``best-args`` writes best.args from a finished study's trials. AI
Platform Training itself was shut down on 2025-01-31; its YAML stays the format (``estimator.tuning``).
A job that would stop at start-up is refused before it is written.
"""

import argparse
import os
import shlex
import sys
import tempfile

import yaml

from estimator.budget import family
from estimator.cloud import rehearsal, vertex_job, vertex_study
from estimator.common import durations, processes
from estimator.common.options import Network
from estimator.training import flags, recipes
from estimator.tuning import report, trial_flags
from estimator.tuning import spec as spec_lib

KINDS = ("custom-job", "hp-tuning-job")
# Where a study's trials share their speed probes' measurements, under its output directory.
PROBE_CACHE_SUFFIX = "/probe-cache"
USAGE = "usage: python -m estimator.vertex {custom-job,hp-tuning-job,local-run,best-args} ... (--help after one)"


class _Retired(argparse.Action):
    """The package route's flags: refused in one line."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=kwargs.get("help"))

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error("%s: %s." % (option_string, vertex_job.RETIRED_PACKAGE_ROUTE))


def _parser(kind: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m estimator.vertex %s" % kind, description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="cmle_config.yaml, cpu_config.yaml or hptuning_*.yaml.")
    parser.add_argument("--output", required=True, help="The YAML file to write.")
    software = parser.add_argument_group("what runs")
    software.add_argument(
        "--image-uri", default=None, help="The package's container (Dockerfile), pushed to Artifact Registry."
    )
    for retired in ("--executor-image-uri", "--package-uri"):
        software.add_argument(retired, action=_Retired, help=argparse.SUPPRESS)
    _add_placement_flags(parser.add_argument_group("where it runs and writes"))
    if kind == "hp-tuning-job":
        parser.add_argument(
            "--network-member",
            default=None,
            choices=[m.name for m in family.MEMBERS],
            help="With --network auto (the recipes): the member every trial trains (docs/cloud.md).",
        )
    return parser


def _add_placement_flags(job) -> None:
    """Where a job runs and writes: region, outputs, identity, TensorBoard, network, VMs, time."""
    job.add_argument("--region", default=None, help="Default: trainingInput.region, else us-central1.")
    job.add_argument("--display-name", default="cifar10-resnet")
    job.add_argument(
        "--base-output-dir",
        default=None,
        help="gs:// directory for the job's outputs (AIP_CHECKPOINT_DIR ...). Default: trainingInput.jobDir.",
    )
    job.add_argument("--service-account", default=None, help="The service account the job runs as.")
    job.add_argument(
        "--tensorboard",
        default=None,
        help="A Vertex AI TensorBoard instance that streams the job's summaries; needs --service-account.",
    )
    job.add_argument("--network", default=None, help="A VPC network peered with Vertex AI (projects/N/global/...).")
    job.add_argument(
        "--spot",
        action="store_true",
        help="Run on Spot VMs: cheaper; a VM taken back saves a checkpoint, and the job resumes from it.",
    )
    job.add_argument(
        "--restart-job-on-worker-restart",
        action="store_true",
        help="Restart every worker of the job when one restarts (Scheduling.restartJobOnWorkerRestart).",
    )
    job.add_argument(
        "--timeout",
        type=durations.flag,
        default=None,
        metavar="DURATION",
        help="The longest the job may run, e.g. 8h or 2h30m (Vertex AI's default: 7 days).",
    )


def _trial_flags(trainer_flags, training_input, member_name):
    """A study's trainer flags for its trials: the training split alone for a recipe of a final model, one
    member of the family for --network auto (``estimator.tuning.trial_flags``); with the notes to print."""
    pools = vertex_job.worker_pools(training_input)
    parsed = vertex_job.parse_trainer_flags(
        recipes.expand(trainer_flags), vertex_job.job_cluster(pools), int(pools[0][2].get("acceleratorCount", 0))
    )
    member = None
    if parsed.network == Network.AUTO:
        if not member_name:
            members = ", ".join(repr(m.name) for m in family.MEMBERS)
            raise spec_lib.SpecError(
                "--network auto: name the member every trial trains with --network-member (%s)." % members
            )
        member = family.member(member_name)
    elif member_name:
        raise spec_lib.SpecError("--network-member %r goes with --network auto: drop it." % member_name)
    source = "--recipe %s" % parsed.recipe if getattr(parsed, "recipe", None) else "the flags given"
    extra, notes = trial_flags.for_trials(parsed.train_subsets, source, member)
    if member is not None:
        notes.append("every trial trains %s (--network-member)" % member.name)
    return trainer_flags + extra, notes


def _shared_probe_cache(trainer_flags, base_output_dir):
    """A study's trials, each on a new machine of one type, share the speed probes' measurements: the first
    trial's timing serves the others (``--probe-cache`` under the study's output directory, unless given)."""
    given = vertex_job.trainer_values(recipes.expand(trainer_flags))
    if "probe_cache" in given:
        return trainer_flags, []
    directory = (given.get("job_dir") or base_output_dir).rstrip("/") + PROBE_CACHE_SUFFIX
    note = "the trials share their speed probes' measurements in %s (--probe-cache)" % directory
    return trainer_flags + ["--probe-cache", directory], [note]


def write_config(kind: str, argv) -> int:
    own, trainer_flags = processes.split_argv(argv)
    args = _parser(kind).parse_args(own)
    try:
        config, options, notes = _job_config(kind, args, trainer_flags)
    except spec_lib.SpecError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    temporary = args.output + ".tmp"
    with open(temporary, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(temporary, args.output)
    for note in notes:
        print("note: %s." % note)
    command = "gcloud ai %s create --region %s --display-name %s --config %s" % (
        "custom-jobs" if kind == "custom-job" else "hp-tuning-jobs",
        options.region,
        shlex.quote(args.display_name),
        shlex.quote(args.output),
    )
    print("Wrote %s. Submit it with:\n  %s" % (args.output, command))
    print(vertex_job.quota_needs(config, options.region))
    print(
        "Rehearse it here first: python -m estimator.vertex local-run %s --engine docker --map gs://B=DIR (or "
        "--image IMAGE=PYTHON: a Python with the package installed stands for the image)" % shlex.quote(args.output)
    )
    return 0


def _job_config(kind: str, args, trainer_flags):
    """``(the job's config, its vertex_job.JobOptions, notes for the user)`` for ``kind`` from the parsed
    ``args`` and the trainer's flags. Raises ``spec_lib.SpecError`` for what gcloud or Vertex AI would refuse."""
    training_input = spec_lib.load(args.config)
    options = vertex_job.job_options(
        training_input,
        image_uri=args.image_uri,
        base_output_dir=args.base_output_dir,
        schedule=vertex_job.scheduling(args.spot, args.restart_job_on_worker_restart, args.timeout),
        service_account=args.service_account,
        network=args.network,
        tensorboard=args.tensorboard,
        region=args.region,
    )
    trainer_flags = vertex_job.job_args(trainer_flags, training_input, options.base_output_dir)
    machines = {k: v for k, v in training_input.items() if k != "hyperparameters"}
    cluster_note = vertex_job.cluster_note(vertex_job.worker_pools(machines))
    notes = [cluster_note] if cluster_note else []
    if kind == "custom-job":
        if "hyperparameters" in training_input:
            raise spec_lib.SpecError(
                "%s has trainingInput.hyperparameters: a custom job runs no study: use hp-tuning-job." % args.config
            )
        return vertex_job.custom_job_spec(machines, trainer_flags, options), options, notes
    if "resumePreviousJobId" in (training_input.get("hyperparameters") or {}):
        field = "trainingInput.hyperparameters.resumePreviousJobId"
        raise spec_lib.SpecError("%s: a Vertex AI tuning job cannot continue another: remove it." % field)
    study_spec = spec_lib.study_spec(training_input, flags.flag_names())
    trainer_flags, trial_notes = _trial_flags(trainer_flags, machines, args.network_member)
    trainer_flags, shared = _shared_probe_cache(trainer_flags, options.base_output_dir)
    trainer_flags = vertex_job.job_args(trainer_flags, machines, options.base_output_dir)
    config = vertex_study.hyperparameter_tuning_job(machines, study_spec, trainer_flags, args.display_name, options)
    return config, options, trial_notes + shared + notes


def _pairs(values, flag: str) -> dict:
    out = {}
    for value in values or ():
        key, sep, target = value.rpartition("=")
        if not sep or not key or not target:
            raise spec_lib.SpecError("%s %r must be KEY=VALUE." % (flag, value))
        out[key] = target
    return out


def _with_config(path: str, use):
    """``(use(the YAML at path), None)``, or ``(None, 2)`` with the one line printed: a file that cannot be read,
    or what gcloud or Vertex AI would refuse."""
    try:
        with open(path) as f:
            return use(yaml.safe_load(f)), None
    except (OSError, yaml.YAMLError) as e:
        print("error: %s: %s" % (path, e), file=sys.stderr)
    except spec_lib.SpecError as e:
        print("error: %s" % e, file=sys.stderr)
    return None, 2


def _local_run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m estimator.vertex local-run",
        description="Run a written CustomJobSpec, or one trial of a HyperparameterTuningJob, on this machine as "
        "Vertex AI would (estimator.cloud.rehearsal).",
    )
    parser.add_argument("config", help="The YAML custom-job or hp-tuning-job wrote.")
    parser.add_argument(
        "--image", action="append", metavar="URI=PYTHON", help="The Python that stands for an image (repeatable)."
    )
    parser.add_argument(
        "--engine",
        default=None,
        metavar="docker|podman",
        help="Run the images no --image names in their containers with this engine (docs/cloud.md).",
    )
    parser.add_argument(
        "--map", action="append", metavar="gs://B/P=DIR", help="A Cloud Storage prefix's local directory (repeatable)."
    )
    parser.add_argument("--trial", default="1", help="A tuning job's trial id (default 1).")
    parser.add_argument(
        "--param", action="append", metavar="NAME=VALUE", help="A trial's parameter (default: mid-range)."
    )
    parser.add_argument("--work-dir", default=None, help="The rehearsal's own files (default: a new temporary one).")
    parser.add_argument("--timeout", type=float, default=3600, help="Stop everything after this many seconds.")
    return parser


def local_run(argv) -> int:
    args = _local_run_parser().parse_args(argv)

    def run(config):
        images, mapping = _pairs(args.image, "--image"), _pairs(args.map, "--map")
        work_dir = args.work_dir or tempfile.mkdtemp(prefix="vertex-local-run-")
        return rehearsal.rehearse(
            config,
            images,
            mapping,
            work_dir,
            args.trial,
            _pairs(args.param, "--param"),
            timeout=args.timeout,
            engine=args.engine,
        )

    result, refused = _with_config(args.config, run)
    if refused:
        return refused
    _print_rehearsal(result)
    return result.exit_code


def _print_rehearsal(result) -> None:
    """A rehearsal's outcome as the user reads it: the AIP_* directories, the metric reported, the exit."""
    for variable, path in sorted(result.outputs.items()):
        print("%s=%s" % (variable, path))
    if result.metric:
        for earlier in result.reports[:-1]:
            print("Measurement: step %s %s" % (earlier.get("global_step"), _measured(earlier)))
        print("Reported to Vertex AI: %s" % _measured(result.metric))
    else:
        print("Reported to Vertex AI: nothing (no cloudml-hypertune report from the chief)")
    print("The chief exited with %d." % result.exit_code)


def _measured(report: dict) -> str:
    return " ".join(
        "%s=%s" % kv for kv in sorted(report.items()) if kv[0] not in ("timestamp", "trial") and kv[1] != ""
    )


def _best_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m estimator.vertex best-args",
        description="best.args from a finished Vertex AI study: the flags it was given with its best trial's "
        "parameters, read from each trial's hparams.json and results.json under its output directory.",
    )
    parser.add_argument("config", help="The YAML hp-tuning-job wrote (the study as submitted).")
    parser.add_argument("--output", default=report.BEST_ARGS, help="The file to write (default %(default)s).")
    parser.add_argument(
        "--map", action="append", metavar="gs://B/P=DIR", help="Read a Cloud Storage prefix from a local copy."
    )
    return parser


def best_args(argv) -> int:
    args = _best_args_parser().parse_args(argv)

    def read(config):
        if not isinstance(config, dict) or "trialJobSpec" not in config:
            raise spec_lib.SpecError("%s is not a HyperparameterTuningJob (no trialJobSpec)." % args.config)
        mapping = _pairs(args.map, "--map")
        local = lambda path: rehearsal.mapped(path, mapping, required=False)  # noqa: E731
        return config, vertex_study.finished_trials(config, local)

    read_back, refused = _with_config(args.config, read)
    if refused:
        return refused
    config, trials = read_back
    if not trials:
        print("error: no trial of %s has written its results.json yet." % args.config, file=sys.stderr)
        return 1
    [metric] = config["studySpec"]["metrics"]
    pick = max if metric["goal"] == spec_lib.Goal.MAXIMIZE else min
    trial, values, value = pick(trials, key=lambda t: t[2])
    for t, v, m in trials:
        print("trial %s: %s %.4f with %s" % (t, metric["metricId"], m, " ".join("--%s=%s" % kv for kv in v.items())))
    path = report.write_best_args(
        args.output,
        trial_flags.given(_study_trainer_args(config)),
        trial,
        values,
        "of the Vertex AI study %s (%d trials finished): %s %.4f on the validation split"
        % (config.get("displayName", args.config), len(trials), metric["metricId"], value),
    )
    print(
        "Best trial %s. The final model: python -m estimator.cifar10_main @%s --data-dir D --job-dir J" % (trial, path)
    )
    return 0


def _study_trainer_args(config: dict) -> list:
    """The trainer's flags a study's trials were given, as the user gave them (without the probe cache that
    ``_shared_probe_cache`` added)."""
    pool = config["trialJobSpec"]["workerPoolSpecs"][0]
    trial_args = pool["containerSpec"]["args"]
    if trial_args[-2:-1] == ["--probe-cache"] and trial_args[-1].endswith(PROBE_CACHE_SUFFIX):
        trial_args = trial_args[:-2]
    return trial_args


VERBS = {"local-run": local_run, "best-args": best_args}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in VERBS:
        return VERBS[argv[0]](argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE + "\n\n" + __doc__.split("\n\n", 1)[1].rstrip())
        return 0
    if not argv or argv[0] not in KINDS:
        print("%s\n(python -m estimator.vertex --help says more)" % USAGE, file=sys.stderr)
        return 2
    return write_config(argv[0], argv[1:])
