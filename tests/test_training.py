"""End-to-end training through ``python -m estimator.cifar10_main`` (slow: real training)."""

import json
import math
import os
import re
import time

import numpy as np
import pytest
import tensorflow as tf

from estimator.data.convert import convert, read_archive
from estimator.data.records import CLASS_NAMES
from tests import cifar_archives as ca
from tests.helpers import events, fetch_json, run_job, run_main, tensorboard, train_here

# The learning check: the quarter-width airbench network (the recipes' family), 400 steps of 64 images (6 epochs
# of the real training images: at 300 the hardest class was too near the class rule's line), batch-norm decay
# 0.9 so the moving averages keep up. What it measured: docs/health.md.
LEARN = (
    "--num-gpus 0 --network airbench --width-multiplier 0.25 --train-batch-size 64 --eval-batch-size 339 "
    "--train-steps 400 --batch-norm-decay 0.9 --seed 1 --log-every-n-steps 100 --export false"
).split()
LOSS_WINDOW = {"LOSS_WINDOW": 100}  # the not-decreasing rule's window within 400 steps


@pytest.fixture(scope="module")
def shuffled_records(tmp_path_factory, mini_archive):
    """The mini archive with its training labels permuted: nothing left to learn."""
    tmp = tmp_path_factory.mktemp("shuffled")
    batches = read_archive(mini_archive)
    rng = np.random.RandomState(0)
    raw = {}
    for name in ca.BATCH_NAMES:
        data, labels = batches[name]
        labels = [int(x) for x in (rng.permutation(labels) if name.startswith("data_batch") else labels)]
        raw[name] = {b"data": data, b"labels": labels, b"batch_label": name.encode()}
    path = str(tmp / "shuffled.tar.gz")
    sha = ca.write_tar(path, ca.official_members(raw))
    convert(str(tmp / "data"), source=path, sha256=sha, progress=False, log=lambda *_: None)
    return str(tmp / "data")


@pytest.mark.slow
def test_a_network_learns_real_images(mini_records, tmp_path, capsys):
    rc, log = train_here(capsys, mini_records, str(tmp_path / "job"), *LEARN, rules=LOSS_WINDOW)
    assert rc == 0, log[-3000:]
    results = json.load(open(str(tmp_path / "job" / "results.json")))
    assert results["global_step"] == 400 and results["eval_examples"] == 1017
    assert results["accuracy"] >= 0.30, results  # chance is 0.10
    assert results["validation_accuracy"] >= 0.30, results
    # No false alarm from the health rules on a run that learns.
    assert not os.path.exists(str(tmp_path / "job" / "health.json")), open(str(tmp_path / "job" / "health.json")).read()


@pytest.mark.slow
def test_shuffled_labels_do_not_pass_the_learning_check(shuffled_records, tmp_path, capsys):
    rc, log = train_here(capsys, shuffled_records, str(tmp_path / "job"), *LEARN, rules=LOSS_WINDOW)
    assert rc == 0, log[-3000:]
    results = json.load(open(str(tmp_path / "job" / "results.json")))
    assert results["accuracy"] < 0.20, results
    # The health rules saw it: the smoothed loss of steps 200-299 was no lower than that of 0-99.
    record = json.load(open(str(tmp_path / "job" / "health.json")))
    assert [(r["rule"], r["action"]) for r in record] == [("loss_not_decreasing", "warn")], record
    assert record[0]["step"] in (200, 300) and record[0]["value"] < 0.01, record
    assert "health: step %d: the training loss is not decreasing" % record[0]["step"] in log


@pytest.mark.slow
def test_same_seed_deterministic_runs_are_identical_with_the_recipes_flags(mini_records, tmp_path):
    """Two runs with one seed and --deterministic are identical, a third with another seed is not; they run the
    flags the recipes use: epochs, onecycle, smoothing, Nesterov, final-only evaluation, flip TTA."""

    def train(job, seed):
        rc, log = run_job(
            mini_records,
            job,
            *(
                "--num-gpus 0 --num-layers 8 --train-epochs 0.5 --train-batch-size 64 --lr-schedule onecycle "
                "--learning-rate 0.2 --label-smoothing 0.1 --nesterov --eval-policy final --eval-flip-tta "
                "--eval-batch-size 200 --save-checkpoints-steps 10 --log-every-n-steps 1 --export false "
                "--deterministic --seed"
            ).split(),
            str(seed),
        )
        assert rc == 0, log[-3000:]
        reader = tf.train.load_checkpoint(job)
        return (
            [v for _, v in events(job)["loss"]],
            {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()},
        )

    job = str(tmp_path / "a")
    losses_a, weights_a = train(job, 7)
    losses_b, weights_b = train(str(tmp_path / "b"), 7)
    assert len(losses_a) == 32 and losses_a == losses_b
    assert weights_a.keys() == weights_b.keys()
    for k in weights_a:
        np.testing.assert_array_equal(weights_a[k], weights_b[k], err_msg=k)
    # A different seed gives a different run: the check can fail.
    assert train(str(tmp_path / "c"), 8)[0] != losses_a

    results = json.load(open(os.path.join(job, "results.json")))
    assert results["global_step"] == 32  # 0.5 x 4,068 / 64 = 31.8, rounded up
    assert 0 <= results["accuracy_flip_tta"] <= 1 and results["eval_examples"] == 1017
    described = json.load(open(os.path.join(job, "hparams.json")))
    assert described["hparams"]["lr_schedule"] == "onecycle" and described["hparams"]["train_epochs"] == 0.5
    assert described["derived"]["warmup_steps"] == 6 and described["derived"]["peak_learning_rate"] == 0.2
    # Checkpoints every 10 steps, but only the final evaluation ran.
    assert [s for s, _ in events(os.path.join(job, "eval_validation"))["accuracy"]] == [32]
    # Summaries every step: 6 warm-up steps up to 0.2, then linearly to 0 at step 32.
    steps, rates = zip(*events(job)["train/learning_rate"])
    assert steps == tuple(range(1, 33))  # the Estimator files step s's summary under s + 1
    expected = [0.2 * (s + 1) / 6 if s < 6 else 0.2 * (32 - s) / 26 for s in range(32)]
    np.testing.assert_allclose(rates, expected, rtol=1e-6)


@pytest.mark.slow
def test_two_cpu_towers_resume_records_and_summaries(mini_records, tmp_path):
    """Two towers, a resumed run, what a job records, and what TensorBoard shows of it (the health probes'
    scalars, the pictures); with --export false, no export."""
    job = str(tmp_path / "job")
    flags = [
        "--data-dir",
        mini_records,
        "--job-dir",
        job,
        *(
            "--num-gpus 0 --num-cpu-towers 2 --num-layers 8 --train-batch-size 32 --eval-batch-size 50 "
            "--log-every-n-steps 10 --seed 3 --export false --save-checkpoints-steps 15 --eval-throttle-secs 0 "
            "--health-every-n-steps 10"
        ).split(),
    ]
    rc, log = run_main("--train-steps", "30", *flags)
    assert rc == 0, log[-3000:]
    assert "2 tower(s) on /cpu:0, /cpu:1, 16 images per tower per step" in log
    assert "is deprecated" not in log and "Calling model_fn" not in log  # concise by default
    assert os.path.exists(os.path.join(job, "model.ckpt-30.index"))
    assert not os.path.exists(os.path.join(job, "export"))
    assert json.load(open(os.path.join(job, "hparams.json")))["hparams"]["export"] is False
    assert not os.path.exists(os.path.join(job, "health.json"))  # a healthy run: no alarms
    assert open(os.path.join(job, "curves.png"), "rb").read(4) == b"\x89PNG"
    _health_scalars_and_pictures_reach_tensorboard(job)

    rc, log = run_main("--train-steps", "60", *flags)
    assert rc == 0, log[-3000:]
    # One progress line per 10 steps, the first after the first step of this process.
    steps = [int(s) for s in re.findall(r"step (\d+)/60 \(\d+%\) \| ", log)]
    assert steps == [31, 41, 51, 60], steps  # resumed from the checkpoint, not from 0
    assert re.search(r"Evaluation \[validation\] at step 60: accuracy [\d.]+, .* on 1017 images", log)

    results = json.load(open(os.path.join(job, "results.json")))
    assert {
        "global_step",
        "accuracy",
        "loss",
        "eval_examples",
        "examples_per_sec",
        "train_seconds",
        "validation_accuracy",
    } <= set(results)
    assert results["global_step"] == 60 and results["eval_examples"] == 1017  # 1017 = 20 x 50 + 17
    assert results["examples_per_sec"] > 0 and results["train_seconds"] > 0
    hp = json.load(open(os.path.join(job, "hparams.json")))
    assert hp["hparams"]["num_cpu_towers"] == 2 and hp["derived"]["per_tower_batch_size"] == 16
    assert hp["derived"]["learning_rate_boundaries"] == [127 * 82, 127 * 123, 127 * 300]  # 4068 // 32

    train_tags = events(job)
    assert {"loss", "train/learning_rate", "train/accuracy", "train/cross_entropy"} <= set(train_tags)
    assert any(tag.startswith("train/images") for tag in train_tags)
    eval_tags = events(os.path.join(job, "eval_validation"))
    assert {"accuracy", "loss", "eval_examples"} <= set(eval_tags)
    assert os.path.isdir(os.path.join(job, "eval_test"))


def _health_scalars_and_pictures_reach_tensorboard(job):
    with tensorboard(job) as base:
        deadline, images = time.time() + 90, {}
        while time.time() < deadline:
            try:
                images = fetch_json(base + "images/tags")
                scalars = fetch_json(base + "scalars/tags")
                if (
                    "pictures/confusion_matrix" in images.get("eval_validation", {})
                    and "pictures/training_batch" in images.get(".", {})
                    and "per_class_accuracy/cat" in scalars.get("eval_validation", {})
                ):
                    break
            except OSError:
                pass
            time.sleep(1)
        assert "pictures/training_batch" in images["."], images
        assert {"pictures/confusion_matrix", "pictures/most_confident_mistakes"} <= set(images["eval_validation"])
        scalars = fetch_json(base + "scalars/tags")
        assert {
            "health/gradient_norm",
            "health/init_loss",
            "health/input_mean",
            "health/input_std",
            "health/min_gradient_mean_abs",
            "health/update_ratio_max",
        } <= set(scalars["."])
        assert {"per_class_accuracy/" + n for n in CLASS_NAMES} <= set(scalars["eval_validation"])
        norm = fetch_json(base + "scalars/scalars?tag=health/gradient_norm&run=.")
        assert [step for _, step, _ in norm] == [0, 10, 20]
        init = fetch_json(base + "scalars/scalars?tag=health/init_loss&run=.")
        assert len(init) == 1 and abs(init[0][2] - math.log(10)) < 0.25
        shots = fetch_json(base + "images/images?tag=pictures/confusion_matrix&run=eval_validation")
        assert [s["step"] for s in shots] == [15, 30]
        histograms = fetch_json(base + "histograms/tags")
        assert {"weights/fc/kernel", "gradients/fc/kernel", "weights/init_conv/kernel"} <= set(histograms["."])


@pytest.mark.slow
def test_cli_bad_flag_exits_2_with_message(mini_records, tmp_path):
    rc, log = run_job(mini_records, str(tmp_path), "--num-gpus", "0", "--num-layers", "45")
    assert rc == 2 and "num_layers=45 is not 6n+2" in log and "Traceback" not in log


@pytest.mark.slow
def test_non_finite_loss_stops_at_once_with_a_message(mini_records, tmp_path, capsys):
    job = str(tmp_path / "job")
    rc, log = train_here(
        capsys,
        mini_records,
        job,
        *"--num-gpus 0 --num-layers 8 --train-steps 50 --train-batch-size 32 --learning-rate 1e6 --seed 1".split(),
    )
    assert rc == 3, log[-3000:]
    last = log.strip().splitlines()[-1]
    match = re.match(
        r"error: training stopped at step (\d+): (the loss \(nan\)|the gradient of \S+ \(the loss "
        r"was still finite: [-\d.e+]+\)) is not finite, at learning rate 1e\+06\. Last good checkpoint: "
        r"(\S+)\. Lower --learning-rate",
        last,
    )
    assert match, last
    step = int(match.group(1))
    assert step < 10 and match.group(3) == os.path.join(job, "model.ckpt-0")
    record = json.load(open(os.path.join(job, "health.json")))
    # The first step's update already said so (a warning), then the NaN stopped training.
    assert [(r["rule"], r["step"], r["action"]) for r in record] == [
        ("update_ratio", 0, "warn"),
        ("non_finite", step, "stop"),
    ]
    assert record[0]["value"] > 10 and "the learning rate is far too high" in record[0]["message"]
    assert all(set(r) == {"rule", "step", "value", "threshold", "action", "message"} for r in record)
    assert not os.path.exists(os.path.join(job, "results.json"))


def test_a_job_ends_with_a_summary_of_where_everything_is():
    from estimator import train
    from tests.helpers import hp

    params = hp(job_dir="/tmp/j")
    results = {
        "accuracy": 0.8816,
        "eval_examples": 10000,
        "accuracy_flip_tta": 0.8877,
        "accuracy_tta": 0.8903,
        "global_step": 696,
        "wall_secs": 292.4,
        "final_export": "/tmp/j/export/final/1764115200",
    }
    assert train.summary_lines(params, results) == [
        "Done: test accuracy 88.16% on 10,000 images (with flips 88.77%, flips and translations 89.03%) at step "
        "696, in 0:04:52.",
        "  results:     /tmp/j/results.json (hparams.json, curves.png beside it)",
        "  exports:     /tmp/j/export/final/1764115200 (and the best by validation in export/best)",
        "  TensorBoard: tensorboard --logdir /tmp/j",
    ]
    plain = {k: v for k, v in results.items() if k not in ("accuracy_flip_tta", "accuracy_tta", "final_export")}
    assert (
        train.summary_lines(params, plain)[0] == "Done: test accuracy 88.16% on 10,000 images at step 696, in 0:04:52."
    )
    assert len(train.summary_lines(params, plain)) == 3
