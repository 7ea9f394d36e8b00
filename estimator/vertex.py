"""Command line: Vertex AI job configs from AI Platform Training's YAML, their rehearsal, a study's best.args
(``estimator.cloud.commands`` says how; ``python -m estimator.vertex --help`` lists the verbs)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's first import

from estimator.common import logs  # noqa: E402

logs.quiet_imports()

from estimator.cloud.commands import main  # noqa: E402
from estimator.common import processes  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    processes.exit_with(main())
