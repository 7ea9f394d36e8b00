"""Command line: Vertex AI job configs from the YAML files of AI Platform Training.

    python -m estimator.vertex custom-job --config cmle_config.yaml \\
        --package-uri gs://B/cifar10-resnet-estimator-0.3.0.tar.gz --output job.yaml \\
        [--region R] [--image-uri IMAGE] [--base-output-dir gs://B/jobs/J] -- <trainer flags>
    python -m estimator.vertex hp-tuning-job --config hptuning_config.yaml \\
        --package-uri ... --output hp.yaml [...] -- <trainer flags>

Writes the YAML that ``gcloud ai custom-jobs create --config`` (a ``CustomJobSpec``)
or ``gcloud ai hp-tuning-jobs create --config`` (a ``HyperparameterTuningJob``)
takes, then prints the exact gcloud command. AI Platform Training itself was
shut down on 2025-01-31; its YAML stays the format (``estimator.tuning``).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # checking trainer flags builds its parser (TensorFlow)

import yaml  # noqa: E402

from estimator.common import logs  # noqa: E402

logs.quiet_imports()

from estimator.cloud import vertex_job, vertex_study  # noqa: E402
from estimator.common import processes  # noqa: E402
from estimator.training import time_budget  # noqa: E402
from estimator.tuning import spec as spec_lib  # noqa: E402


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    own, trainer_flags = processes.split_argv(argv)
    parser = argparse.ArgumentParser(prog="python -m estimator.vertex", description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=["custom-job", "hp-tuning-job"])
    parser.add_argument("--config", required=True, help="cmle_config.yaml or hptuning_config.yaml.")
    parser.add_argument("--package-uri", default=None, help="gs:// URI of the package's sdist.")
    parser.add_argument(
        "--image-uri",
        default=None,
        help="A container of your own with the package installed (instead of the prebuilt image).",
    )
    parser.add_argument("--output", required=True, help="The YAML file to write.")
    parser.add_argument("--region", default="us-central1")
    parser.add_argument("--display-name", default="cifar10-resnet")
    parser.add_argument(
        "--base-output-dir",
        default=None,
        help="gs:// directory for the job's outputs (Vertex AI sets AIP_MODEL_DIR under it).",
    )
    parser.add_argument(
        "--spot",
        action="store_true",
        help="Run on Spot VMs (scheduling strategy SPOT): cheaper, and a VM may be taken back at any time; the "
        "trainer saves a checkpoint on the SIGTERM that comes first and resumes when Vertex AI restarts it.",
    )
    parser.add_argument(
        "--restart-job-on-worker-restart",
        action="store_true",
        help="Restart every worker of the job when one restarts (Scheduling.restartJobOnWorkerRestart).",
    )
    parser.add_argument(
        "--timeout",
        type=time_budget.duration_flag,
        default=None,
        metavar="DURATION",
        help="The longest the job may run, e.g. 8h or 2h30m (Vertex AI's default: 7 days).",
    )
    args = parser.parse_args(own)
    schedule = vertex_job.scheduling(args.spot, args.restart_job_on_worker_restart, args.timeout)
    try:
        training_input = spec_lib.load(args.config)
        trainer_flags = vertex_job.job_args(trainer_flags, training_input)
        if args.kind == "custom-job":
            training_input = {k: v for k, v in training_input.items() if k != "hyperparameters"}
            config = vertex_job.custom_job_spec(
                training_input, args.package_uri, trainer_flags, args.base_output_dir, args.image_uri, schedule
            )
            command = "gcloud ai custom-jobs create --region %s --display-name %s --config %s" % (
                args.region,
                args.display_name,
                args.output,
            )
        else:
            from estimator.training import flags

            study_spec = spec_lib.study_spec(training_input, flags.flag_names())
            machines = {k: v for k, v in training_input.items() if k != "hyperparameters"}
            config = vertex_study.hyperparameter_tuning_job(
                machines,
                study_spec,
                args.package_uri,
                trainer_flags,
                args.display_name,
                args.base_output_dir,
                args.image_uri,
                schedule,
            )
            command = "gcloud ai hp-tuning-jobs create --region %s --display-name %s --config %s" % (
                args.region,
                args.display_name,
                args.output,
            )
    except spec_lib.SpecError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    temporary = args.output + ".tmp"
    with open(temporary, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(temporary, args.output)
    if not args.image_uri:
        print(
            "note: %s is Google's prebuilt TensorFlow 2.15 image (%s); if it can no longer be pulled, build a "
            "container of your own and pass --image-uri (docs/cloud.md, Vertex AI)."
            % (
                vertex_job.PREBUILT_GPU_IMAGE if "NVIDIA" in str(config) else vertex_job.PREBUILT_CPU_IMAGE,
                vertex_job.PREBUILT_SUPPORT,
            ),
            file=sys.stderr,
        )
    print("Wrote %s. Submit it with:\n  %s" % (args.output, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
