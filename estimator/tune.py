"""Command line: a tuning study on this machine, from the YAML the cloud service took
(``estimator.tuning.commands`` says how; ``python -m estimator.tune --help``)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's first import

from estimator.common import logs  # noqa: E402

logs.quiet_imports()

from estimator.common import processes  # noqa: E402
from estimator.tuning.commands import build_parser, main  # noqa: E402

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    processes.exit_with(main())
