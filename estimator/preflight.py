"""Command line: ``python -m estimator.preflight --data-dir D [trainer flags] [--output DIR]``.

Runs Karpathy's checks (``estimator.health.before_run``) on the network the
same trainer flags would train, prints a PASS/FAIL table, writes
``preflight.json`` and ``training_batch.png`` to ``--output`` (default
``JOB_DIR/preflight`` with ``--job-dir``, else ``./preflight``), and exits
with 1 if any check failed.
"""

import argparse
import json
import os

from estimator.common import logs, processes

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
logs.quiet_imports()

with processes.imports_uncollected():
    from estimator.budget import job as budget_job
    from estimator.common import storage
    from estimator.health import before_run
    from estimator.networks import registry
    from estimator.training import config, flags


def build_parser() -> argparse.ArgumentParser:
    """The trainer's flags plus ``--output``."""
    parser = flags.build_parser()
    parser.prog = "python -m estimator.preflight"
    parser.description = "Checks data, model and training set-up before a run (about a minute on a CPU)."
    parser.add_argument(
        "--output",
        default=None,
        help="Where preflight.json and training_batch.png go (default JOB_DIR/preflight, or ./preflight).",
    )
    return parser


def parse(argv=None):
    """``(hparams, output dir)`` of the trainer flags plus ``--output``; exits 2 on bad input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    output = args.output or (storage.join(args.job_dir, "preflight") if args.job_dir else "preflight")
    # Pre-flight trains nothing: it checks this machine's network as the trainer would build it
    # here, so a cluster or trial of TF_CONFIG does not apply, and the job dir may be left out.
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CLOUD_ML_TRIAL_ID")}
    try:
        namespace = argparse.Namespace(**dict(vars(args), job_dir=args.job_dir or output))
        hp = budget_job.resolve(namespace, environ, given=flags.given_flags(argv))
    except (ValueError, config.MissingDataError) as e:
        parser.error(str(e))
    return hp, output


def main(argv=None) -> int:
    logs.configure(logs.verbose_requested(argv))  # while the flags are resolved
    hp, output = parse(argv)
    logs.configure(hp.verbose)

    print("Pre-flight checks of %s (%s, %s) on %s" % (registry.describe(hp), hp.precision, hp.data_format, hp.data_dir))
    print("%-32s %-6s  %s" % ("check", "result", "detail"))
    checks = before_run.run_checks(hp, output, log=print)
    failed = [c.name for c in checks if not c.passed]
    storage.write_text(
        storage.join(output, "preflight.json"), json.dumps([c._asdict() for c in checks], indent=2) + "\n"
    )
    print(
        "%d of %d checks passed%s; details in %s"
        % (
            len(checks) - len(failed),
            len(checks),
            (": FAILED " + ", ".join(failed)) if failed else "",
            storage.join(output, "preflight.json"),
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    processes.exit_with(main())
