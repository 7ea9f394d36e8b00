"""Tuning trials: the validation metric through cloudml-hypertune and TensorBoard; gs:// paths."""

import json
import os
import subprocess
import time

import pytest

from estimator import cifar10_main
from estimator.common import processes, storage
from estimator.data.convert import convert
from estimator.training import config
from tests import cifar_archives as ca
from tests.helpers import REPO, events, fetch_json, free_port, tensorboard


@pytest.mark.slow
def test_trial_reports_validation_accuracy_to_hypertune_and_tensorboard(mini_records, tmp_path):
    metrics = tmp_path / "hypertune" / "output.metrics"
    # What the service sets for a one-machine trial: a cluster of one master.
    tf_config = {
        "cluster": {"master": ["127.0.0.1:%d" % free_port()]},
        "task": {"type": "master", "index": 0, "trial": "5"},
        "environment": "cloud",
    }
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        CLOUD_ML_HP_METRIC_FILE=str(metrics),
        TF_CONFIG=json.dumps(tf_config),
        AIP_TENSORBOARD_LOG_DIR=str(tmp_path / "vertex-tensorboard"),
    )
    env.pop("CLOUD_ML_TRIAL_ID", None)
    job = tmp_path / "job"
    proc = subprocess.run(
        processes.trainer_command(
            [
                "--data-dir",
                mini_records,
                "--job-dir",
                str(job),
                *(
                    "--num-gpus 0 --num-layers 8 --train-steps 20 --train-batch-size 32 "
                    "--save-checkpoints-steps 10 --eval-throttle-secs 0 --learning-rate=0.033 --save-summary-steps 5"
                ).split(),
            ]
        ),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial_dir = job / "5"  # parallel trials never share a directory
    results = json.load(open(str(trial_dir / "results.json")))
    assert json.load(open(str(trial_dir / "hparams.json")))["hparams"]["learning_rate"] == 0.033

    reports = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["global_step"] for r in reports] == ["10", "20"]  # one report per evaluation
    assert all(r["trial"] == "5" and set(r) >= {"accuracy", "timestamp", "checkpoint_path"} for r in reports)
    # The study sees the validation split, never the test split.
    assert float(reports[-1]["accuracy"]) == pytest.approx(results["validation_accuracy"], abs=1e-7)
    assert reports[-1]["checkpoint_path"].endswith("model.ckpt-20")

    # Vertex AI's TensorBoard directory gets the training and evaluation summaries too.

    mirrored = events(str(tmp_path / "vertex-tensorboard"))
    assert {"loss", "train/learning_rate"} <= set(mirrored)
    # At the Estimator's own summary steps, labelled alike (the merged summaries are run on those steps alone).
    assert [s for s, _ in mirrored["loss"]] == [s for s, _ in events(str(trial_dir))["loss"]] == [1, 6, 11, 16]
    assert [s for s, _ in events(str(tmp_path / "vertex-tensorboard" / "eval_validation"))["accuracy"]] == [10, 20]
    # ... and the health scalars and pictures, which the trainer writes itself.
    assert {"health/init_loss", "health/gradient_norm", "pictures/training_batch"} <= set(mirrored)
    mirrored_eval = events(str(tmp_path / "vertex-tensorboard" / "eval_validation"))
    assert [s for s, _ in mirrored_eval["pictures/confusion_matrix"]] == [10, 20]

    with tensorboard(str(trial_dir)) as plugins:
        base = plugins + "scalars"
        deadline, tags = time.time() + 90, {}
        while time.time() < deadline:
            try:
                tags = fetch_json(base + "/tags")
                if "accuracy" in tags.get("eval_validation", {}) and "loss" in tags.get(".", {}):
                    break
            except OSError:
                pass
            time.sleep(1)
        assert "accuracy" in tags["eval_validation"], tags
        assert {"loss", "train/learning_rate", "train/accuracy"} <= set(tags["."])
        series = fetch_json(base + "/scalars?tag=accuracy&run=eval_validation")
        assert [step for _, step, _ in series] == [10, 20]
        assert series[-1][2] == pytest.approx(float(reports[-1]["accuracy"]), abs=1e-6)


def test_trainer_reads_gcs_records_and_writes_gcs_records_of_its_own(gcs, tmp_path):
    sha, _ = ca.make_archive(str(tmp_path / "a.tar.gz"), sizes=(3, 3, 2, 2, 4, 5))
    convert(gcs + "/cifar", source=str(tmp_path / "a.tar.gz"), sha256=sha, progress=False, log=lambda *_: None)
    hp = cifar10_main.parse(
        ["--data-dir", gcs + "/cifar", "--job-dir", gcs + "/jobs/1", "--num-gpus", "0", "--train-batch-size", "2"]
    )
    assert hp.num_train_examples == 10 and hp.job_dir == gcs + "/jobs/1"
    config.write_json(storage.join(hp.job_dir, "results.json"), {"accuracy": 0.5})
    assert json.loads(storage.read_text(gcs + "/jobs/1/results.json")) == {"accuracy": 0.5}


def test_missing_gcs_records_say_run_the_converter(gcs, capsys):
    with pytest.raises(SystemExit):
        cifar10_main.parse(["--data-dir", gcs + "/nothing", "--job-dir", gcs + "/j", "--num-gpus", "0"])
    assert "Run generate_cifar10_tfrecords.py --data-dir=%s/nothing first" % gcs in capsys.readouterr().err
