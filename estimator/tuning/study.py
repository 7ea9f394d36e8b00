"""A tuning study on this machine, run as AI Platform's service ran one.

One coordinator process owns the Optuna study (``JOB_DIR/study.db``, SQLite) and
asks it for parameters and tells it results (Optuna's FAQ advises against several
processes writing one SQLite file). Each trial is a separate
``python -m estimator.cifar10_main`` process with:

* the trainer flags given after ``--``, ``--job-dir JOB_DIR`` and one
  ``--name=value`` flag per parameter;
* ``TF_CONFIG`` ``{"task": {"type": "worker", "index": 0, "trial": ID}}`` (without a
  cluster, TensorFlow 2.15 accepts only ``worker``) and ``CLOUD_ML_TRIAL_ID``, so
  the trainer writes to ``JOB_DIR/ID``;
* its own ``CLOUD_ML_HP_METRIC_FILE`` (``JOB_DIR/ID/hypertune/output.metrics``),
  read while it runs: each report feeds the pruner at its global step, the last
  one is the trial's value, as the service took it.

Mapping of the service's settings:

* ``algorithm``: unspecified (the service's Bayesian optimisation) -> Optuna's TPE
  (multivariate, constant liar, for trials running in parallel); ``RANDOM_SEARCH`` ->
  random sampling; ``GRID_SEARCH`` -> the grid of every INTEGER, DISCRETE and
  CATEGORICAL value, in an order shuffled by ``--seed``, at most ``maxTrials`` points
  (queued with ``Study.enqueue_trial``: Optuna's ``GridSampler`` stops a study only
  inside ``optimize``, not under ask/tell).
* ``enableTrialEarlyStopping`` -> Optuna's median rule: a trial whose metric at a
  step is worse than the median of earlier trials at that same step is stopped
  (the closest documented rule to the service's). Trials then checkpoint and
  evaluate every quarter of their steps (unless the flags say otherwise), so all
  report at the same steps.
* ``UNIT_REVERSE_LOG_SCALE`` (no Optuna distribution): Vizier's definition,
  x = lo + hi - z with z log-uniform on [lo, hi]; dense near ``maxValue``.
* ``maxFailedTrials``: the study fails on that many failed trials (0: a quarter
  of ``maxTrials``, at least 1, see ``spec.default_max_failed_trials``).
* Resume: the same command continues the study; trials a killed coordinator
  left RUNNING are recorded as failed (their directories kept) and finished
  trials are never run again. ``resumePreviousJobId`` names the study.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from estimator.common import cluster as cluster_lib
from estimator.common import processes
from estimator.training import flags
from estimator.tuning import spec as spec_lib
from estimator.tuning.spec import Algorithm, Goal, ParamType, Scale

STUDY_DB = "study.db"
METRIC_FILE = os.path.join("hypertune", "output.metrics")
LOG_FILE = "trial.log"


class StudyFailed(RuntimeError):
    """Too many trials failed (maxFailedTrials)."""


@dataclass
class Running:
    trial: object  # optuna.trial.Trial
    trial_id: str
    values: dict
    process: subprocess.Popen
    log: object
    start: float
    reported_steps: set


def flag_value(param: spec_lib.Param, value):
    """How a value goes on the command line: integers as integers, the rest as given."""
    if param.type == ParamType.INTEGER or (
        param.type == ParamType.DISCRETE
        and float(value).is_integer()
        and all(float(v).is_integer() for v in param.values)
    ):
        return int(value)
    return value


def sample(trial, params) -> dict:
    """Draws one value per parameter from the Optuna trial; returns {flag name: value}."""
    values = {}
    for p in params:
        if p.type == ParamType.DOUBLE and p.scale == Scale.UNIT_REVERSE_LOG_SCALE:
            z = trial.suggest_float(p.name + ":reverse_log_z", p.min_value, p.max_value, log=True)
            values[p.name] = p.min_value + p.max_value - z
        elif p.type == ParamType.DOUBLE:
            values[p.name] = trial.suggest_float(p.name, p.min_value, p.max_value, log=p.log)
        elif p.type == ParamType.INTEGER and p.scale == Scale.UNIT_REVERSE_LOG_SCALE:
            z = trial.suggest_float(p.name + ":reverse_log_z", p.min_value, p.max_value, log=True)
            values[p.name] = int(round(p.min_value + p.max_value - z))
        elif p.type == ParamType.INTEGER:
            values[p.name] = trial.suggest_int(p.name, p.min_value, p.max_value, log=p.log)
        else:
            values[p.name] = trial.suggest_categorical(p.name, list(p.values))
        values[p.name] = flag_value(p, values[p.name])
    return values


def make_sampler(study_spec: spec_lib.StudySpec, seed):
    if study_spec.algorithm in (
        Algorithm.GRID_SEARCH,
        Algorithm.RANDOM_SEARCH,
    ):  # grid points are queued: see grid_points
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)


def grid_points(study_spec: spec_lib.StudySpec, seed):
    """Every point of the grid, as {optuna param name: value}, in an order shuffled by ``seed``."""
    space = spec_lib.grid(study_spec.params)
    names = list(space)
    points = [dict(zip(names, values)) for values in itertools.product(*(space[n] for n in names))]
    random.Random(seed).shuffle(points)
    return points


def make_pruner(study_spec: spec_lib.StudySpec):
    if study_spec.early_stopping:
        # Compare from the second trial on, at every reported step.
        return optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    return optuna.pruners.NopPruner()


def read_reports(path: str, metric: str):
    """[(global_step, value)] from a hypertune metrics file; lines being rewritten are skipped."""
    reports = []
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError:
        return reports
    for line in lines:
        try:
            entry = json.loads(line)
            reports.append((int(float(entry["global_step"])), float(entry[metric])))
        except (ValueError, KeyError, TypeError):
            continue
    return reports


def log_tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def trial_command(trainer_flags, job_dir: str, values: dict):
    return processes.trainer_command(
        list(trainer_flags) + ["--job-dir", job_dir] + ["--%s=%s" % (name, value) for name, value in values.items()]
    )


def trainer_defaults(trainer_flags, study_spec: spec_lib.StudySpec, parallel: int, train_steps: int) -> list:
    """Flags the coordinator adds unless given (read as the trainer reads them: @FILE and --recipe too): threads
    per trial; checkpoints at fixed steps for pruning."""
    extra = []
    given = flags.given_flags(trainer_flags)
    cores = os.cpu_count() or 1
    if parallel > 1 and "num_intra_threads" not in given:
        # Each trial its share of the cores: K trials x all cores would oversubscribe them.
        extra += ["--num-intra-threads", str(max(1, cores // parallel)), "--num-inter-threads", "1"]
    if study_spec.early_stopping and train_steps and "save_checkpoints_steps" not in given:
        extra += ["--save-checkpoints-steps", str(max(1, train_steps // 4)), "--eval-throttle-secs", "0"]
    return extra


class Coordinator(object):
    """Runs the study; ``run()`` returns the finished Optuna study."""

    def __init__(
        self,
        study_spec,
        job_dir: str,
        trainer_flags,
        max_trials: int,
        parallel: int,
        seed=None,
        study_name: str = None,
        extra_flags=(),
        out=sys.stdout,
    ):
        self.spec = study_spec
        self.job_dir = os.path.abspath(job_dir)
        self.trainer_flags = list(trainer_flags) + list(extra_flags)
        self.max_trials = max_trials
        self.parallel = parallel
        self.seed = seed
        self.study_name = study_name or study_spec.resume_previous_job_id or os.path.basename(self.job_dir)
        self.out = out
        self.host = socket.gethostname()
        self.running = {}
        self.study = None  # the open study, also after StudyFailed

    # -- bookkeeping ---------------------------------------------------------

    def open_study(self):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = "sqlite:///" + os.path.join(self.job_dir, STUDY_DB)
        if self.spec.resume_previous_job_id:
            names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
            if self.spec.resume_previous_job_id not in names:
                field = "trainingInput.hyperparameters.resumePreviousJobId %r" % self.spec.resume_previous_job_id
                where = os.path.join(self.job_dir, STUDY_DB)
                raise spec_lib.SpecError(
                    "%s: %s holds no such study (it has: %s)." % (field, where, ", ".join(names) or "none")
                )
        study = optuna.create_study(
            storage=storage,
            study_name=self.study_name,
            load_if_exists=True,
            direction="maximize" if self.spec.goal == Goal.MAXIMIZE else "minimize",
            sampler=make_sampler(self.spec, self.seed),
            pruner=make_pruner(self.spec),
        )
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            # A coordinator killed mid-trial: record the trial as failed, keep its directory. One still running
            # on this host (the same command twice) keeps its trials.
            if not _coordinator_gone(frozen.user_attrs.get("coordinator"), self.host):
                continue
            study.tell(frozen.number, state=TrialState.FAIL)
            self.say(
                "trial %s was left running by an earlier coordinator: recorded as failed"
                % frozen.user_attrs.get("trial_id", frozen.number + 1)
            )
        if self.spec.algorithm == Algorithm.GRID_SEARCH:
            # Queued points of an earlier run keep their values in "fixed_params" until they start.
            seen = [t.params or t.system_attrs.get("fixed_params", {}) for t in study.get_trials(deepcopy=False)]
            for point in grid_points(self.spec, self.seed):
                if point not in seen:
                    study.enqueue_trial(point)
        return study

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def row(self, trial_id, values, metric, state, seconds) -> None:
        params = " ".join("%s=%s" % (k, _short(v)) for k, v in values.items())
        self.say(
            "%-6s %-52s %-10s %-9s %7.1f s"
            % (trial_id, params, "-" if metric is None else "%.4f" % metric, state, seconds)
        )

    # -- trials ----------------------------------------------------------------

    def start(self, study) -> None:
        trial = study.ask()
        trial_id = str(trial.number + 1)
        values = sample(trial, self.spec.params)
        trial.set_user_attr("trial_id", trial_id)
        trial.set_user_attr("values", values)
        trial.set_user_attr("coordinator", "%s:%d" % (self.host, os.getpid()))
        trial_dir = os.path.join(self.job_dir, trial_id)
        os.makedirs(trial_dir, exist_ok=True)
        env = dict(
            os.environ,
            CLOUD_ML_TRIAL_ID=trial_id,
            CLOUD_ML_HP_METRIC_FILE=os.path.join(trial_dir, METRIC_FILE),
            TF_CONFIG=cluster_lib.tf_config({}, "worker", 0, trial_id),
        )
        command = trial_command(self.trainer_flags, self.job_dir, values)
        trial.set_user_attr("command", " ".join(command[1:]))
        log = open(os.path.join(trial_dir, LOG_FILE), "w")
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=_die_with_parent
        )
        self.running[trial.number] = Running(trial, trial_id, values, process, log, time.time(), set())

    def poll(self, study, run: Running):
        """Feeds new reports to the pruner; returns the finished state, or None while running."""
        trial_dir = os.path.join(self.job_dir, run.trial_id)
        reports = read_reports(os.path.join(trial_dir, METRIC_FILE), self.spec.metric)
        for step, value in reports:
            if step not in run.reported_steps:
                run.reported_steps.add(step)
                run.trial.report(value, step)
                if self.spec.early_stopping and run.process.poll() is None and run.trial.should_prune():
                    processes.stop_group(run.process)
                    return TrialState.PRUNED, value
        code = run.process.poll()
        if code is None:
            return None
        if code == 0 and reports:
            return TrialState.COMPLETE, reports[-1][1]
        why = "exit status %d" % code if code else "no %s reported" % self.spec.metric
        run.trial.set_user_attr("error", why)
        run.trial.set_user_attr("log_tail", log_tail(os.path.join(trial_dir, LOG_FILE)))
        return TrialState.FAIL, None

    def finish(self, study, run: Running, state, value) -> None:
        run.log.close()
        seconds = time.time() - run.start
        run.trial.set_user_attr("seconds", round(seconds, 1))
        if state == TrialState.COMPLETE:
            study.tell(run.trial, value)
        else:
            study.tell(run.trial, state=state)
        del self.running[run.trial.number]
        self.row(run.trial_id, run.values, value, state.name, seconds)
        if state == TrialState.FAIL:
            self.say(
                "  trial %s failed (%s); last lines of %s:\n%s"
                % (
                    run.trial_id,
                    run.trial.user_attrs.get("error"),
                    os.path.join(self.job_dir, run.trial_id, LOG_FILE),
                    _indent(run.trial.user_attrs.get("log_tail", "")),
                )
            )

    @staticmethod
    def _started(study) -> int:
        """Trials run or running (queued grid points are not counted)."""
        return len([t for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING])

    def _check_failures(self, study) -> None:
        """At the study's limit of failed trials: stops the running trials (failed too) and raises StudyFailed."""
        failed = len(study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))
        if failed < self.spec.max_failed_trials:
            return
        for run in list(self.running.values()):
            processes.stop_group(run.process)
            self.finish(study, run, TrialState.FAIL, None)
        limit = "maxFailedTrials %d%s" % (
            self.spec.max_failed_trials,
            "" if self.spec.max_failed_trials_given else ", by the default rule",
        )
        raise StudyFailed("%d trial(s) failed, the study's limit (%s): stopping." % (failed, limit))

    def run(self):
        study = self.study = self.open_study()
        done = self._started(study)
        if done:
            self.say("Continuing study %r: %d trial(s) already recorded." % (self.study_name, done))
        self.say("%-6s %-52s %-10s %-9s %9s" % ("trial", "parameters", self.spec.metric, "state", "duration"))
        try:
            while True:
                self._check_failures(study)
                while len(self.running) < self.parallel and self._started(study) < self.max_trials:
                    self.start(study)
                if not self.running:
                    break
                for run in list(self.running.values()):
                    result = self.poll(study, run)
                    if result is not None:
                        self.finish(study, run, *result)
                time.sleep(0.5)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM: passed on to each trial, which saves a checkpoint and ends; the
            # same command continues the study.
            for run in list(self.running.values()):
                processes.stop_group(run.process, grace=60)
            raise
        return study


def _coordinator_gone(tag, host: str) -> bool:
    """Whether the coordinator ``host:pid`` that started a trial has ended: an older study's (no tag) and another
    host's (the study was moved) have; on this host, its process is gone."""
    their_host, _, pid = (tag or "").rpartition(":")
    if their_host != host:
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return int(pid) == os.getpid()  # this very coordinator, started again under the same pid: gone


def _die_with_parent() -> None:
    """In the trial's process (Linux): SIGTERM when the coordinator dies, even by SIGKILL,
    so a killed study leaves no trial training on."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _short(value) -> str:
    return "%.4g" % value if isinstance(value, float) else str(value)


def _indent(text: str) -> str:
    return "".join("    " + line for line in text.splitlines(True))
