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

import argparse
import math
import os
import signal
import sys

from estimator.budget import family
from estimator.common import processes
from estimator.training import flags, hparams
from estimator.tuning import report, trial_flags
from estimator.tuning import spec as spec_lib

STORAGE_RETIRED = hparams.Retired(
    None, "a study on several machines is a Vertex AI tuning job", "0.6.0", "docs/cloud.md"
)


def check_trainer_flags(trainer_flags, job_dir: str):
    """The trainer's own parsing and checks (data present, flags valid); returns (hparams, option strings)."""
    # Here, not at the top: it imports TensorFlow, which --help and a bad config do not need.
    from estimator.budget import job as budget_job

    if "job_dir" in flags.given_values(trainer_flags):
        raise spec_lib.SpecError("--job-dir goes before --: the study gives each trial its own directory.")
    # The study's trials get a TF_CONFIG and trial of their own.
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CLOUD_ML_TRIAL_ID")}
    hp, _ = budget_job.parse(list(trainer_flags) + ["--job-dir", job_dir], environ=environ)
    return hp, flags.flag_names()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m estimator.tune",
        description=__doc__.split("\n")[0],
        usage="%(prog)s --config YAML --job-dir DIR [options] -- <trainer flags>",
    )
    parser.add_argument("--config", required=True, help="A job YAML with trainingInput.hyperparameters.")
    parser.add_argument("--job-dir", required=True, help="The study's directory: study.db, one directory per trial.")
    parser.add_argument("--max-trials", type=int, default=None, help="Overrides maxTrials.")
    parser.add_argument(
        "--parallel-trials",
        type=int,
        default=None,
        help="Trials at once, each on its share of the cores (default maxParallelTrials, at most the cores).",
    )
    parser.add_argument("--seed", type=int, default=None, help="Seeds the sampler.")
    parser.add_argument("--study-name", default=None, help="The study's name in JOB_DIR/study.db (default: JOB_DIR's).")
    parser.add_argument("--storage", action=flags.RetiredFlag, retired=STORAGE_RETIRED)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    own, trainer_flags = processes.split_argv(argv)
    args = build_parser().parse_args(own)
    try:
        from estimator.tuning import study  # Optuna, an extra: only a local study needs it
    except ImportError as e:
        print(
            "error: a local study needs Optuna (%s): pip install 'cifar10-resnet-estimator[tune]'." % e, file=sys.stderr
        )
        return 2
    given_flags = list(trainer_flags)
    try:
        hp, trainer_flags, study_spec = _checked_study(args, trainer_flags)
    except spec_lib.SpecError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2

    max_trials, parallel = _trial_counts(args, study_spec)
    extra = study.trainer_defaults(trainer_flags, study_spec, parallel, hp.train_steps)
    os.makedirs(args.job_dir, exist_ok=True)
    coordinator = study.Coordinator(
        study_spec,
        args.job_dir,
        trainer_flags,
        max_trials,
        parallel,
        seed=args.seed,
        extra_flags=extra,
        study_name=args.study_name,
    )
    print(
        "Study %r in %s: %s, goal %s %s, %d trial(s), %d at a time%s"
        % (
            coordinator.study_name,
            os.path.abspath(args.job_dir),
            study_spec.algorithm,
            study_spec.goal,
            study_spec.metric,
            max_trials,
            parallel,
            ", early stopping (median rule)" if study_spec.early_stopping else "",
        )
    )
    result, status = _run(coordinator)
    if result is None:
        return status
    paths = report.write(args.job_dir, result, study_spec)
    _report_best(args.job_dir, result, study_spec, given_flags)
    print("Wrote %s and %s" % (paths["csv"], paths["png"]))
    return status


def _checked_study(args, trainer_flags):
    """``(the trials' HParams, their flags, the StudySpec)`` from the parsed ``args`` and the trainer's flags;
    raises ``spec_lib.SpecError`` on a bad count, config or flag, before anything is written."""
    for name in ("max_trials", "parallel_trials"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise spec_lib.SpecError("%s %d must be at least 1." % (flag, getattr(args, name)))
    training_input = spec_lib.load(args.config)
    hp, options, trainer_flags = _trials_flags(trainer_flags, args.job_dir)
    return hp, trainer_flags, spec_lib.study_spec(training_input, options)


def _trial_counts(args, study_spec):
    """``(trials, at a time)``: the flags', else the config's (a grid's no more than its points; at a time no
    more than this machine's cores)."""
    max_trials = args.max_trials or study_spec.max_trials
    if study_spec.algorithm == spec_lib.Algorithm.GRID_SEARCH:
        max_trials = min(max_trials, math.prod(len(values) for values in spec_lib.grid(study_spec.params).values()))
    parallel = args.parallel_trials or min(study_spec.max_parallel_trials, os.cpu_count() or 1)
    return max_trials, parallel


def _trials_flags(trainer_flags, job_dir: str):
    """``(hp, options, the trials' flags)``: the trainer flags checked, with what the trials need added
    (``trial_flags.for_trials``: the training split alone, a recipe's chosen member), and said so."""
    hp, options = check_trainer_flags(trainer_flags, job_dir)
    member = family.member(hp.network_choice["member"]) if hp.network_choice else None
    source = "--recipe %s" % hp.recipe if hp.recipe else "the flags given"
    extra, notes = trial_flags.for_trials(hp.train_subsets, source, member)
    for note in notes:
        # best.args gives the recipe back with the best trial's parameters, for the final model.
        print(
            "note: %s; %s gives it back with the best trial's parameters, for the final model."
            % (note, os.path.join(job_dir, report.BEST_ARGS))
        )
    if member is not None:
        # best.args keeps --network auto, for the final model's own budget.
        chosen = "the member --network auto chose for this budget on this machine"
        print("note: the trials train %s, %s." % (member.name, chosen))
    if not extra:
        return hp, options, list(trainer_flags)
    trainer_flags = list(trainer_flags) + extra
    hp, options = check_trainer_flags(trainer_flags, job_dir)
    return hp, options, trainer_flags


def _run(coordinator):
    """``(the study, exit status)``, or ``(None, status)`` where the study stopped before a report."""
    from estimator.tuning import study  # main has found Optuna

    received = [signal.SIGINT]

    def terminated(signum, frame):
        received[0] = signum
        raise KeyboardInterrupt  # the coordinator passes it on to the trials

    signal.signal(signal.SIGTERM, terminated)
    try:
        return coordinator.run(), 0
    except KeyboardInterrupt:
        print(
            "interrupted: the trials running were stopped (each saved a checkpoint); the same command continues "
            "the study",
            file=sys.stderr,
        )
        return None, 128 + received[0]
    except study.StudyFailed as e:
        print("error: %s" % e, file=sys.stderr)
        return coordinator.study, 1
    except spec_lib.SpecError as e:
        print("error: %s" % e, file=sys.stderr)
        return None, 2


def _report_best(job_dir: str, result, study_spec, given_flags) -> None:
    """Prints the best trial and its command, and writes best.args (the given flags with its parameters)."""
    best = report.best_trial(result)
    if best is None:
        return
    values, trial_id = best.user_attrs["values"], best.user_attrs["trial_id"]
    print(
        "Best trial %s: %s %.4f with %s"
        % (trial_id, study_spec.metric, best.value, " ".join("--%s=%s" % kv for kv in values.items()))
    )
    # The trainer added the trial's id to --job-dir (CLOUD_ML_TRIAL_ID), as on the cloud service.
    print(
        "  python %s  (with CLOUD_ML_TRIAL_ID=%s: its directory %s)"
        % (best.user_attrs["command"], trial_id, os.path.join(job_dir, trial_id))
    )
    best_args = report.write_best_args(
        os.path.join(job_dir, report.BEST_ARGS),
        given_flags,
        trial_id,
        values,
        "of the study in %s: %s %.4f on the validation split"
        % (os.path.abspath(job_dir), study_spec.metric, best.value),
    )
    print("The final model with them: python -m estimator.cifar10_main @%s --data-dir D --job-dir J" % best_args)
