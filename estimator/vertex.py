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

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's first import

from estimator.common import logs  # noqa: E402

logs.quiet_imports()

from estimator.cloud.commands import main  # noqa: E402
from estimator.common import processes  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    processes.exit_with(main())
