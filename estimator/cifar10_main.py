"""Command line: ``python -m estimator.cifar10_main --data-dir DIR --job-dir DIR [flags]``.

Parses and validates the flags (``estimator.hparams``), reads ``TF_CONFIG``
(``estimator.cluster``) and hands over to ``estimator.train.run``.
``python -m estimator.cifar10_main @FILE`` reads flags from a file.
"""

import os
import sys

from estimator import logs

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep C++ info lines out of the log
logs.quiet_imports()

import tensorflow as tf  # noqa: E402

from estimator import cluster as cluster_lib  # noqa: E402
from estimator import health, storage, train  # noqa: E402
from estimator import hparams as hparams_lib  # noqa: E402
from estimator.cifar10 import Cifar10DataSet, MissingDataError  # noqa: E402
from estimator.health import nonfinite  # noqa: E402


def parse(argv=None):
    """Returns ``(hparams, cluster)``; exits with status 2 and a message on bad input."""
    parser = hparams_lib.build_parser()
    args = parser.parse_args(argv)
    try:
        cluster = cluster_lib.from_environment()
        num_train = 0
        if cluster.task_type != "ps":  # a parameter server reads no data
            train_data = Cifar10DataSet(args.data_dir, "train")
            train_data.verify()
            for subset in (train.VALIDATION_SUBSET, train.TEST_SUBSET):
                # Before the first step: a bad evaluation file would otherwise fail after training.
                Cifar10DataSet(args.data_dir, subset).verify()
            num_train = train_data.num_examples_per_epoch()
        hp = hparams_lib.from_args(args, cluster, num_train, hparams_lib.visible_gpus())
    except (ValueError, MissingDataError) as e:
        parser.error(str(e))
    if cluster.trial and args.job_dir:
        # Parallel tuning trials must never share a checkpoint directory. Vertex AI's
        # AIP_CHECKPOINT_DIR / AIP_MODEL_DIR are per trial already (BASE/<trial>/...).
        hp = hp.replace(job_dir=storage.join(hp.job_dir, cluster.trial))
    return hp, cluster


def main(argv=None) -> int:
    logs.configure(logs.verbose_requested(argv))
    hp, cluster = parse(argv)
    if hp.deterministic:
        tf.config.experimental.enable_op_determinism()
    if cluster.task_type in cluster_lib.TRAINING_ROLES and cluster.spec.get("ps"):
        try:
            cluster_lib.wait_for_parameter_servers(cluster, hp.ps_wait_secs)
        except cluster_lib.UnreachableError as e:
            print("error: %s" % e, file=sys.stderr)
            return 1
    try:
        train.run(hp, cluster)
    except nonfinite.NonFiniteError as e:
        print("error: %s" % e, file=sys.stderr)
        return nonfinite.EXIT_STATUS
    except health.HealthStop as e:
        print("error: %s" % e, file=sys.stderr)
        return health.EXIT_STATUS
    return 0


if __name__ == "__main__":
    sys.exit(main())
