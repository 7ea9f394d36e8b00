"""Command line: ``python -m estimator.preflight --data-dir D [trainer flags] [--output DIR]``.

Runs Karpathy's checks (``estimator.health.preflight``) on the network the
same trainer flags would train, prints a PASS/FAIL table, writes
``preflight.json`` and ``training_batch.png`` to ``--output`` (default
``JOB_DIR/preflight`` with ``--job-dir``, else ``./preflight``), and exits
with 1 if any check failed.
"""

import json
import os
import sys

from estimator import logs

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
logs.quiet_imports()

from estimator import cluster as cluster_lib  # noqa: E402
from estimator import hparams as hparams_lib  # noqa: E402
from estimator import storage  # noqa: E402
from estimator.cifar10 import Cifar10DataSet, MissingDataError  # noqa: E402


def parse(argv=None):
    parser = hparams_lib.build_parser()
    parser.prog = "python -m estimator.preflight"
    parser.description = "Checks data, model and training set-up before a run (about a minute on a CPU)."
    parser.add_argument("--output", default=None,
                        help="Where preflight.json and training_batch.png go "
                        "(default JOB_DIR/preflight, or ./preflight without --job-dir).")
    args = parser.parse_args(argv)
    output = args.output or (storage.join(args.job_dir, "preflight") if args.job_dir else "preflight")
    try:
        data = Cifar10DataSet(args.data_dir, "train")
        for subset in ("train", "validation", "eval"):
            Cifar10DataSet(args.data_dir, subset).verify()
        args.job_dir = args.job_dir or output
        hp = hparams_lib.from_args(args, cluster_lib.Cluster(), data.num_examples_per_epoch(),
                                   hparams_lib.visible_gpus())
    except (ValueError, MissingDataError) as e:
        parser.error(str(e))
    return hp, output


def main(argv=None) -> int:
    logs.configure(logs.verbose_requested(argv))
    hp, output = parse(argv)
    from estimator.health import preflight

    print("Pre-flight checks of ResNet-%d %s (%s, %s) on %s" % (hp.num_layers, hp.resnet_version, hp.precision,
                                                                  hp.data_format, hp.data_dir))
    print("%-32s %-6s  %s" % ("check", "result", "detail"))
    checks = preflight.run_checks(hp, output, log=print)
    failed = [c.name for c in checks if not c.passed]
    storage.write_text(storage.join(output, "preflight.json"), json.dumps(
        [c._asdict() for c in checks], indent=2) + "\n")
    print("%d of %d checks passed%s; details in %s" % (
        len(checks) - len(failed), len(checks), (": FAILED " + ", ".join(failed)) if failed else "",
        storage.join(output, "preflight.json")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
