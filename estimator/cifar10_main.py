"""Command line: ``python -m estimator.cifar10_main --data-dir DIR --job-dir DIR [flags]``.

Resolves the flags and the environment into one ``HParams``
(``estimator.config``) and hands over to ``estimator.train.run``.
``python -m estimator.cifar10_main @FILE`` reads flags from a file.
"""

import os
import sys

from estimator import logs

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep C++ info lines out of the log
logs.quiet_imports()

import tensorflow as tf  # noqa: E402

from estimator import cluster as cluster_lib  # noqa: E402
from estimator import config, health, train  # noqa: E402
from estimator.health import nonfinite  # noqa: E402


def parse(argv=None):
    """The run's ``HParams`` (``estimator.config.resolve``); exits with status 2 and a message on bad input."""
    return config.parse(argv)[0]


def main(argv=None) -> int:
    logs.configure(logs.verbose_requested(argv))
    hp = parse(argv)
    if hp.deterministic:
        tf.config.experimental.enable_op_determinism()
    cluster = hp.cluster
    if cluster.task_type in cluster_lib.TRAINING_ROLES and cluster.spec.get("ps"):
        try:
            cluster_lib.wait_for_parameter_servers(cluster, hp.ps_wait_secs)
        except cluster_lib.UnreachableError as e:
            print("error: %s" % e, file=sys.stderr)
            return 1
    try:
        train.run(hp)
    except nonfinite.NonFiniteError as e:
        print("error: %s" % e, file=sys.stderr)
        return nonfinite.EXIT_STATUS
    except health.HealthStop as e:
        print("error: %s" % e, file=sys.stderr)
        return health.EXIT_STATUS
    return 0


if __name__ == "__main__":
    sys.exit(main())
