"""Command line: ``python -m estimator.cifar10_main --data-dir DIR --job-dir DIR [flags]``.

Resolves the flags and the environment into one ``HParams``
(``estimator.training.config``, with ``estimator.budget.job`` where the flags ask for a budget or an
auto choice), chooses the job's guests (``job_guests``: each feature that is on) and hands over to
``estimator.train.run``.
``python -m estimator.cifar10_main @FILE`` reads flags from a file.
"""

import os
import sys
import traceback

from estimator.common import logs, processes
from estimator.training import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep C++ info lines out of the log
logs.quiet_imports()
if __name__ == "__main__":
    flags.check_command_line()  # --help and a bad flag answer at once, not after TensorFlow's import (seconds)

with processes.imports_uncollected():
    import tensorflow as tf

    from estimator import resilience, train
    from estimator.common import cluster as cluster_lib
    from estimator.common import failures
    from estimator.common.options import HealthAction
    from estimator.reporting import summaries
    from estimator.training import config

# Exit codes (docs/faults.md): 0 done; 1 an error; 2 bad flags, data or job dir; 3 a NaN or infinite loss;
# 4 a health rule under --health-checks stop; 74 a full or read-only disk; 75 another trainer holds the job
# dir; 130 SIGINT, 143 SIGTERM (a checkpoint was saved: the same command resumes).
EXIT_STORAGE = 74


def parse(argv=None):
    """The run's ``HParams`` (``estimator.training.config.resolve``); exits with status 2 and a message on bad input."""
    return config.parse(argv, choose=lambda *args: _budget().choose(*args))[0]


def _budget():
    """``estimator.budget.job``, imported by a job that asks for a budget or an auto choice: a plain run
    never loads the budget's package."""
    from estimator.budget import job

    return job


def job_guests(hp, stop=None) -> list:
    """The features this job hosts (``estimator.training.guest``), in the order the job calls them: each package
    is imported only when its feature is on. The exports come before the budget, which keeps the test views that
    fit the time the export left."""
    guests = [stop] if stop is not None else []
    if hp.health_checks != HealthAction.OFF:
        from estimator.health.monitor import HealthChecks

        guests.append(HealthChecks(hp))
    if hp.export:
        from estimator.serving.exporters import Exports

        guests.append(Exports(hp))
    if hp.time_budget:
        guests.append(_budget().BudgetedJob(hp))
    return guests


def _interrupted_line(hp, error: resilience.Interrupted, argv) -> str:
    checkpoint = tf.train.latest_checkpoint(hp.job_dir)
    step = checkpoint.rsplit("-", 1)[-1] if checkpoint else "0"
    command = "python -m estimator.cifar10_main " + " ".join(sys.argv[1:] if argv is None else argv)
    return "%s: stopped at step %s; checkpoint %s; no results.json. The same command resumes: %s" % (
        error,
        step,
        checkpoint or "none yet",
        command,
    )


def main(argv=None) -> int:
    logs.configure(logs.verbose_requested(argv))  # while the flags are resolved (the probes log)
    hp = parse(argv)
    logs.configure(hp.verbose)  # the resolved setting from here on: --verbose in @FILE or a recipe counts
    if hp.deterministic:
        tf.config.experimental.enable_op_determinism()
    return _refusal(hp) or _run(hp, argv)


def _refusal(hp) -> int:
    """0 when this task may start; else, after one line on stderr, its exit status: 1 when the parameter
    servers cannot be reached, 2 when the job dir holds another network's job (then nothing was written)."""
    cluster = hp.cluster
    try:
        if cluster.task_type in cluster_lib.TRAINING_ROLES and cluster.spec.get("ps"):
            cluster_lib.wait_for_parameter_servers(cluster, hp.ps_wait_secs)
        if train.writes_job_records(hp):
            resilience.check_same_network(hp)
    except cluster_lib.UnreachableError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    except resilience.ForeignJobDirError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return 0


def _run(hp, argv) -> int:
    """Trains, evaluates and exports; the exit status."""
    # The chief owns the job dir: it holds the lock and saves on a signal. Workers have
    # nothing to save (the default: a signal ends them), an evaluator only reads.
    owner = train.writes_job_records(hp)
    stop = resilience.SignalStop().install() if owner else None
    lock = None
    try:
        if owner:
            lock = resilience.JobDirLock(hp.job_dir, log=lambda line: print(line, file=sys.stderr)).acquire()
        results = train.run(hp, job_guests(hp, stop))
        if results:
            print("\n".join(train.summary_lines(hp, results)), flush=True)
    except RuntimeError as e:
        status = _stop_status(hp, e, argv)
        if status is None:
            raise
        return status
    except (OSError, tf.errors.OpError) as e:
        failure = failures.storage_failure(e)
        if failure is None:
            raise
        if hp.verbose:
            traceback.print_exc()
        failures.remove_partial_files(hp.job_dir)
        print("error: %s" % failure, file=sys.stderr)
        return EXIT_STORAGE
    finally:
        _close_event_files()
        if lock is not None:
            lock.release()
        if stop is not None:
            stop.uninstall()
    return 0


def _close_event_files() -> None:
    """Closes the job's event files, whichever way it ends (``summaries.close_writers``): on Cloud Storage this
    uploads what came after the writer's last flush (health values and pictures wait for it) and removes the file's
    local copy. A failure here must not hide the job's own exit status: one line on stderr."""
    try:
        summaries.close_writers()
    except (OSError, tf.errors.OpError) as e:
        print("warning: closing the event files: %s" % e, file=sys.stderr)


def _stop_status(hp, error: RuntimeError, argv):
    """The exit status of one of the job's own stops, after its line on stderr; None for any other error."""
    if isinstance(error, resilience.Interrupted):
        print(_interrupted_line(hp, error, argv), file=sys.stderr)
    elif isinstance(error, failures.JobStop):
        print("error: %s" % error, file=sys.stderr)
    else:
        return None
    return error.exit_status


if __name__ == "__main__":
    processes.exit_with(main())
