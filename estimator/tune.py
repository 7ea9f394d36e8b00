"""Command line: a tuning study on this machine, from the YAML the cloud service took.

    python -m estimator.tune --config hptuning_config.yaml --job-dir DIR \\
        [--max-trials N] [--parallel-trials K] [--seed S] -- <trainer flags>

Reads ``trainingInput.hyperparameters`` as AI Platform's service did and runs
the study with Optuna (``estimator.tuning.study`` says how each setting maps).
Trial ``ID`` writes to ``DIR/ID``; the study lives in ``DIR/study.db``; at the
end ``DIR/trials.csv`` and ``DIR/study.png``. Running the same command again
continues the study. Needs the ``[tune]`` extra (Optuna).

Exit status: 0 when the study finished, 1 when too many trials failed, 2 for a
configuration or flag it cannot honour (then nothing is created).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's first import

from estimator.common import logs  # noqa: E402

logs.quiet_imports()

from estimator.common import processes  # noqa: E402
from estimator.tuning.commands import build_parser, main  # noqa: E402

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    processes.exit_with(main())
