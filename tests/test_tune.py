"""Local tuning studies: real trials of a tiny ResNet, as the service ran them."""

import csv
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers import REPO

# ResNet-8 at half width, 16 steps of batch 32: each trial is a real training run of a few seconds.
TRAINER = (
    "--num-gpus 0 --num-layers 8 --width-multiplier 0.5 --train-steps 16 --train-batch-size 32 "
    "--eval-batch-size 339 --batch-norm-decay 0.9 --log-every-n-steps 8 --seed 1 --export false"
).split()


# The one tuned parameter of the small studies.
LEARNING_RATE_PARAM = {"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.05, "maxValue": 0.1}


def write_config(path, **hyperparameters):
    document = {
        "trainingInput": {
            "scaleTier": "BASIC",
            "hyperparameters": dict({"goal": "MAXIMIZE", "hyperparameterMetricTag": "accuracy"}, **hyperparameters),
        }
    }
    path.write_text(yaml.safe_dump(document))
    return str(path)


def tune_command(config, job_dir, data_dir, *options, trainer=TRAINER):
    return (
        [sys.executable, "-m", "estimator.tune", "--config", config, "--job-dir", job_dir]
        + list(options)
        + ["--", "--data-dir", data_dir]
        + list(trainer)
    )


def tune(config, job_dir, data_dir, *options, trainer=TRAINER, timeout=600):
    command = tune_command(config, job_dir, data_dir, *options, trainer=trainer)
    proc = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    return proc.returncode, proc.stdout, proc.stderr


def tune_in_process(capsys, config, job_dir, data_dir, *options):
    """``estimator.tune.main`` in this process, for refusals: they happen before any trial runs."""
    from estimator import tune as tune_lib

    try:
        rc = tune_lib.main(["--config", config, "--job-dir", job_dir, *options, "--", "--data-dir", data_dir] + TRAINER)
    except SystemExit as e:  # argparse's refusal of the tuner's own flags
        rc = e.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def trials(job_dir):
    with open(os.path.join(job_dir, "trials.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_study_with_every_parameter_type_resumes_after_its_coordinator_is_killed(mini_records, tmp_path):
    """Three trials drawing every parameter type; the coordinator is killed while trial 2 runs, and the same
    command resumes the study: trial 2 is recorded as failed, trial 3 runs, trial 1 is never run again."""
    config = write_config(
        tmp_path / "hp.yaml",
        maxTrials=3,
        maxParallelTrials=1,
        maxFailedTrials=2,
        params=[
            {
                "parameterName": "learning-rate",
                "type": "DOUBLE",
                "minValue": 0.01,
                "maxValue": 0.3,
                "scaleType": "UNIT_LOG_SCALE",
            },
            {
                "parameterName": "momentum",
                "type": "DOUBLE",
                "minValue": 0.8,
                "maxValue": 0.95,
                "scaleType": "UNIT_REVERSE_LOG_SCALE",
            },
            {"parameterName": "warmup-epochs", "type": "INTEGER", "minValue": 0, "maxValue": 1},
            {"parameterName": "weight-decay", "type": "DISCRETE", "discreteValues": [0.0001, 0.0005]},
            {"parameterName": "lr-schedule", "type": "CATEGORICAL", "categoricalValues": ["cosine", "onecycle"]},
        ],
    )
    job = str(tmp_path / "study")
    command = tune_command(config, job, mini_records, "--seed", "3")
    coordinator = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    # Kill the coordinator while trial 2 runs (trial 1 is finished).
    while not os.path.exists(os.path.join(job, "2", "trial.log")) and time.time() < deadline:
        time.sleep(0.2)
    coordinator.kill()
    coordinator.wait()
    first = os.path.getmtime(os.path.join(job, "1", "results.json"))
    time.sleep(1)
    rc, out, err = tune(config, job, mini_records, "--seed", "3")
    assert rc == 0, out + err
    assert "trial 2 was left running by an earlier coordinator: recorded as failed" in out
    assert "3 trial(s)" in out and "Continuing study" in out
    rows = trials(job)
    assert [(r["trial"], r["state"]) for r in rows] == [("1", "COMPLETE"), ("2", "FAIL"), ("3", "COMPLETE")]
    assert os.path.getmtime(os.path.join(job, "1", "results.json")) == first  # never run again
    assert os.path.isdir(os.path.join(job, "2"))  # kept
    assert not os.path.exists(os.path.join(job, "2", "results.json"))  # its trainer died with the coordinator
    done = [r for r in rows if r["state"] == "COMPLETE"]
    for r in done:
        # What the trial's trainer resolved is what the study drew, and the metric is its last report.
        described = json.load(open(os.path.join(job, r["trial"], "hparams.json")))["hparams"]
        assert described["learning_rate"] == pytest.approx(float(r["learning-rate"]))
        assert 0.01 <= described["learning_rate"] <= 0.3 and 0.8 <= described["momentum"] <= 0.95
        assert described["momentum"] == pytest.approx(float(r["momentum"]))
        assert described["warmup_epochs"] in (0.0, 1.0) and described["weight_decay"] in (0.0001, 0.0005)
        assert described["lr_schedule"] == r["lr-schedule"]
        results = json.load(open(os.path.join(job, r["trial"], "results.json")))
        assert float(r["accuracy"]) == pytest.approx(results["validation_accuracy"], abs=1e-6)
        metrics = open(os.path.join(job, r["trial"], "hypertune", "output.metrics")).read().splitlines()
        assert json.loads(metrics[-1])["trial"] == r["trial"]
    best = max(done, key=lambda r: float(r["accuracy"]))
    assert "Best trial %s: accuracy %.4f" % (best["trial"], float(best["accuracy"])) in out
    assert "estimator.cifar10_main" in out.split("Best trial")[1]
    assert "(with CLOUD_ML_TRIAL_ID=%s: its directory %s)" % (best["trial"], os.path.join(job, best["trial"])) in out
    assert open(os.path.join(job, "study.png"), "rb").read(4) == b"\x89PNG"
    # Running it once more adds nothing: the study is complete.
    rc, out, _ = tune(config, job, mini_records)
    assert rc == 0 and len(trials(job)) == 3


@pytest.mark.slow
def test_failing_trials_are_recorded_and_limited_and_parallel_trials_share_the_cores(mini_records, tmp_path):
    # num-layers 9 is not 6n+2: that trial's trainer exits with status 2. The two trials run at once.
    params = [{"parameterName": "num-layers", "type": "DISCRETE", "discreteValues": [8, 9]}]
    config = write_config(
        tmp_path / "grid.yaml", maxTrials=5, maxFailedTrials=2, algorithm="GRID_SEARCH", params=params
    )
    job = str(tmp_path / "study")
    rc, out, err = tune(config, job, mini_records, "--parallel-trials", "2")
    assert rc == 0, out + err
    rows = trials(job)
    states = {r["num-layers"]: r["state"] for r in rows}
    assert states == {"8": "COMPLETE", "9": "FAIL"}  # the grid has 2 points: 2 trials, not 5
    assert "failed (exit status 2)" in out and "num_layers=9 is not 6n+2" in out
    assert "2 at a time" in out
    # Each of two trials at once gets half the cores.
    trial = next(r["trial"] for r in rows if r["state"] == "COMPLETE")
    described = json.load(open(os.path.join(job, trial, "hparams.json")))["hparams"]
    assert described["num_intra_threads"] == max(1, os.cpu_count() // 2) and described["num_inter_threads"] == 1

    config = write_config(
        tmp_path / "strict.yaml",
        maxTrials=2,
        maxFailedTrials=1,
        algorithm="GRID_SEARCH",
        params=[{"parameterName": "num-layers", "type": "DISCRETE", "discreteValues": [9, 15]}],
    )
    rc, out, err = tune(config, str(tmp_path / "strict"), mini_records)
    assert rc == 1 and "1 trial(s) failed, the study's limit (maxFailedTrials 1)" in err


@pytest.mark.slow
def test_median_rule_stops_a_trial_worse_at_the_same_step(mini_records, tmp_path):
    # Trial 1 learns (rate 0.2); trial 2 cannot (rate 1e-9): at the steps where both
    # report, trial 2 is below trial 1, so the median rule stops it.
    config = write_config(
        tmp_path / "hp.yaml",
        maxTrials=2,
        enableTrialEarlyStopping=True,
        algorithm="GRID_SEARCH",
        params=[{"parameterName": "learning-rate", "type": "DISCRETE", "discreteValues": [1e-9, 0.2]}],
    )
    job = str(tmp_path / "study")
    trainer = [f for f in TRAINER] + ["--use-distortion-for-training", "false"]
    trainer[trainer.index("--train-steps") + 1] = "48"
    rc, out, err = tune(config, job, mini_records, "--seed", "1", trainer=trainer)
    assert rc == 0, out + err
    rows = trials(job)
    assert [r["learning-rate"] for r in rows] == ["0.2", "1e-09"], "the grid's order for seed 1 changed"
    assert [r["state"] for r in rows] == ["COMPLETE", "PRUNED"]
    # Reports came at fixed steps (a quarter of 48): trial 1 at all four, trial 2 stopped early.
    reports = [json.loads(line)["global_step"] for line in open(os.path.join(job, "1", "hypertune", "output.metrics"))]
    assert reports == ["12", "24", "36", "48"]
    assert not os.path.exists(os.path.join(job, "2", "results.json"))


@pytest.mark.parametrize(
    "param,message",
    [
        (
            {"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.5, "maxValue": 0.1},
            "minValue 0.5 is above maxValue 0.1",
        ),
        (
            {
                "parameterName": "learning-rate",
                "type": "DOUBLE",
                "minValue": 0,
                "maxValue": 0.1,
                "scaleType": "UNIT_LOG_SCALE",
            },
            "scaleType UNIT_LOG_SCALE needs a positive range",
        ),
        (
            {"parameterName": "num-layers", "type": "DISCRETE", "discreteValues": [20, 8]},
            "discreteValues \\[20, 8\\] must be strictly increasing",
        ),
        ({"parameterName": "learning-rate", "type": "FLOAT", "minValue": 0.1, "maxValue": 0.2}, "type 'FLOAT' is not"),
        (
            {"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.1, "maxValue": 0.2, "scale": "LOG"},
            "unknown field scale",
        ),
        (
            {"parameterName": "learning-rat", "type": "DOUBLE", "minValue": 0.1, "maxValue": 0.2},
            "the trainer has no flag --learning-rat",
        ),
    ],
)
def test_bad_configs_are_refused_before_any_trial(mini_records, tmp_path, capsys, param, message):
    import re

    config = write_config(tmp_path / "hp.yaml", maxTrials=2, params=[param])
    job = str(tmp_path / "study")
    rc, out, err = tune_in_process(capsys, config, job, mini_records)
    assert rc == 2 and re.search(message, err), err
    assert not os.path.exists(job)  # no study, no trial directory


def test_grid_search_with_a_double_is_refused(mini_records, tmp_path, capsys):
    config = write_config(
        tmp_path / "hp.yaml",
        algorithm="GRID_SEARCH",
        params=[{"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.1, "maxValue": 0.2}],
    )
    rc, _, err = tune_in_process(capsys, config, str(tmp_path / "study"), mini_records)
    assert rc == 2 and "GRID_SEARCH takes INTEGER, DISCRETE and CATEGORICAL parameters only" in err
    assert not os.path.exists(str(tmp_path / "study"))


def test_unknown_hyperparameters_field_is_refused(tmp_path, mini_records, capsys):
    config = tmp_path / "hp.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainingInput": {
                    "hyperparameters": {
                        "goal": "MAXIMIZE",
                        "maxTrial": 3,
                        "params": [
                            {"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.1, "maxValue": 0.2}
                        ],
                    }
                }
            }
        )
    )
    rc, _, err = tune_in_process(capsys, str(config), str(tmp_path / "study"), mini_records)
    assert rc == 2 and "unknown field maxTrial" in err


def test_the_coordinators_defaults_yield_to_the_trainers_flags_wherever_they_are_given(tmp_path):
    """The threads and checkpoint steps a study adds are left out where the trainer's flags give them: on the
    command line, as --name=value or in a flag file (read as the trainer reads it)."""
    from estimator.tuning import spec as spec_lib
    from estimator.tuning import study

    early_stopping = spec_lib.StudySpec("MAXIMIZE", "accuracy", 4, 2, 1, False, True, None, "ALGORITHM_UNSPECIFIED")
    threads = ["--num-intra-threads", str(max(1, (os.cpu_count() or 1) // 2)), "--num-inter-threads", "1"]
    checkpoints = ["--save-checkpoints-steps", "25", "--eval-throttle-secs", "0"]
    assert study.trainer_defaults(["--num-gpus", "0"], early_stopping, 2, 100) == threads + checkpoints
    assert study.trainer_defaults(["--num-intra-threads=3"], early_stopping, 2, 100) == checkpoints
    assert study.trainer_defaults(["--num-gpus", "0"], early_stopping, 1, 100) == checkpoints  # one at a time
    flag_file = tmp_path / "trial.args"
    flag_file.write_text("--num-intra-threads 3  # their own\n--save-checkpoints-steps 10\n")
    assert study.trainer_defaults(["@%s" % flag_file], early_stopping, 2, 100) == []


def test_a_study_without_optuna_says_which_extra_to_install(mini_records, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # what an install without the [tune] extra imports
    import estimator.tuning

    monkeypatch.delitem(sys.modules, "estimator.tuning.study", raising=False)
    monkeypatch.delattr(estimator.tuning, "study", raising=False)  # as if never imported in this process
    config = write_config(tmp_path / "hp.yaml", params=[LEARNING_RATE_PARAM])
    rc, _, err = tune_in_process(capsys, config, str(tmp_path / "study"), mini_records)
    assert rc == 2 and err.count("\n") == 1, err
    assert "a local study needs Optuna" in err and "pip install 'cifar10-resnet-estimator[tune]'" in err
    assert not os.path.exists(str(tmp_path / "study"))


@pytest.mark.slow
def test_a_study_of_a_recipe_trains_on_the_training_split_and_writes_its_best_args(mini_records, tmp_path):
    """A two-trial study of the 5-minute recipe at a 15 s budget: the trials train on the training split
    alone (the recipe trains a final model on both), report validation accuracy, and best.args gives the
    recipe back with the best parameters, which the trainer then fits on both splits."""
    from estimator.budget import job as budget_job

    job = str(tmp_path / "study")
    config = write_config(
        tmp_path / "c.yaml",
        maxTrials=2,
        maxParallelTrials=1,
        params=[{"parameterName": "label-smoothing", "type": "DISCRETE", "discreteValues": [0.1, 0.2]}],
    )
    trainer = ["--recipe", "cpu_5min", "--time-budget", "15s", "--train-batch-size", "64", "--eval-batch-size", "339"]
    code, out, err = tune(config, job, mini_records, "--seed", "1", trainer=trainer)
    assert code == 0, out + err[-3000:]
    assert (
        "note: the trials train on the training split alone and report accuracy on the validation split "
        "(--recipe cpu_5min trains on train and validation)" in out
    )
    rows = trials(job)
    assert [r["state"] for r in rows] == ["COMPLETE", "COMPLETE"]
    # Each trial's metric is its own validation accuracy. How high it is depends on how many steps 15 s
    # buy on this CPU (a handful on an AVX2-only EPYC), so no threshold: what holds at any speed.
    for r in rows:
        results = json.load(open(os.path.join(job, r["trial"], "results.json")))
        assert float(r["accuracy"]) == pytest.approx(results["validation_accuracy"], abs=1e-6)
        assert results["global_step"] >= 1
    recorded = json.load(open(os.path.join(job, rows[0]["trial"], "hparams.json")))["hparams"]
    assert recorded["train_subsets"] == ["train"] and recorded["recipe"] == "cpu_5min"
    lines = open(os.path.join(job, "best.args")).read().splitlines()
    best = max(rows, key=lambda r: float(r["accuracy"]))
    assert lines[0].startswith("# The best trial (%s) of the study in " % best["trial"])
    assert lines[2] == " ".join(trainer) and lines[3] == "--label-smoothing=%s" % best["label-smoothing"]
    assert "--data-dir" not in " ".join(line for line in lines if not line.startswith("#"))
    # The final model as the trainer resolves best.args (test_training runs a recipe end to end): the recipe's
    # own splits, the best parameters.
    argv = ["@" + os.path.join(job, "best.args"), "--data-dir", mini_records, "--job-dir", str(tmp_path / "final")]
    hp, _ = budget_job.parse(argv, environ=dict(os.environ))  # the tests' cache directory
    assert hp.train_subsets == ("train", "validation") and hp.label_smoothing == float(best["label-smoothing"])


def test_the_retired_shared_storage_is_refused_and_only_a_gone_coordinators_trials_are_failed(
    mini_records, tmp_path, capsys
):
    """--storage (several machines, one study) was retired in 0.6.0: one line, exit 2, nothing created. A trial left
    running is failed on resume unless its coordinator still runs on this host."""
    config = write_config(tmp_path / "hp.yaml", params=[LEARNING_RATE_PARAM])
    job = str(tmp_path / "study")
    rc, _, err = tune_in_process(capsys, config, job, mini_records, "--storage", "journal:x")
    assert rc == 2 and not os.path.exists(job)
    assert err.splitlines()[-1] == (
        "python -m estimator.tune: error: --storage was retired in 0.6.0 (a study on several machines is a Vertex AI "
        "tuning job; docs/cloud.md): drop it."
    )
    from estimator.tuning import study

    host = socket.gethostname()
    assert study._coordinator_gone(None, host) and study._coordinator_gone("elsewhere:%d" % os.getppid(), host)
    assert not study._coordinator_gone("%s:%d" % (host, os.getppid()), host)
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    assert study._coordinator_gone("%s:%d" % (host, dead.pid), host)
