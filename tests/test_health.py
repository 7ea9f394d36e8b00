"""Health rules, their probes, the monitor, pictures, logs and the pre-flight check."""

import functools
import json
import logging
import math
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from estimator.common import logs, processes, tensor_names
from estimator.data.convert import convert, read_archive
from estimator.data.records import CLASS_NAMES
from estimator.health import monitor as monitor_lib
from estimator.health import probes, rules
from estimator.reporting import pictures, summaries
from estimator.training.hooks import EvalPictures
from estimator.training.model_fn import model_fn, model_fn_with
from tests import cifar_archives as ca
from tests import helpers
from tests.helpers import REPO, events, run_joined, train_here

v1 = tf.compat.v1
MODES = tf.estimator.ModeKeys


# The health checks' own short schedule over a small training set.
hp = functools.partial(helpers.hp, train_steps=10, num_train_examples=100, train_batch_size=128, eval_batch_size=100)


# -- rules: exact boundaries ----------------------------------------------------------


def test_init_loss_rule_boundaries():
    ln10 = math.log(10)
    assert rules.init_loss(ln10 + 0.25, 10, 0.25)[1] is None
    value, finding = rules.init_loss(ln10 + 0.2501, 10, 0.25)
    assert value == ln10 + 0.2501 and "too confident" in finding[1]
    assert "labels may leak" in rules.init_loss(ln10 - 0.3, 10, 0.25)[1][1]


def test_gradient_rules_boundaries():
    names = ["a/kernel", "b/kernel"]
    assert rules.vanishing_gradients(names, [1e-7, 1.0], 1e-7) == (1e-7, None)
    value, finding = rules.vanishing_gradients(names, [1.0, 9.9e-8], 1e-7)
    assert value == 9.9e-8 and "b/kernel" in finding[1]
    assert rules.exploding_gradients(100.0, [1.0] * 4, 10) == (None, None)  # too little history
    assert rules.exploding_gradients(10.0, [1.0, 1.0, 2.0, 0.5, 1.0], 10) == (10.0, None)
    ratio, finding = rules.exploding_gradients(10.01, [1.0, 1.0, 2.0, 0.5, 1.0], 10)
    assert ratio == pytest.approx(10.01) and "10.0x its running median 1" in finding[1]
    assert rules.update_ratio(names, [1e-8, 10.0], 1e-8, 10)[1] is None
    value, finding = rules.update_ratio(names, [1e-3, 10.5], 1e-8, 10)
    assert value == 10.5 and "b/kernel" in finding[1] and "far too high" in finding[1]
    value, finding = rules.update_ratio(names, [5e-9, 1e-3], 1e-8, 10)
    assert value == 5e-9 and "a/kernel" in finding[1] and "barely moves" in finding[1]
    # A learning rate of 0 (onecycle's first step) moves nothing by design: not judged.
    assert rules.update_ratio(names, [0.0, 0.0], 1e-8, 10) == (0.0, None)
    assert rules.update_ratio(names, [0.0, 1e-3], 1e-8, 10)[1] is not None


def test_dead_relu_rule_needs_a_full_window_and_counts_channels():
    names = ["r1", "r2"]
    alive = [np.array([True, True, True, True]), np.array([True, False, False, False])]
    assert rules.dead_relus(names, [alive] * 2, 0.5, 3) == (None, None)
    value, finding = rules.dead_relus(names, [alive] * 3, 0.5, 3)
    assert value == 0.75 and "75% of the channels of r2" in finding[1]
    # A channel active in any batch of the window is alive.
    woke = [alive[0], np.array([False, True, True, False])]
    assert rules.dead_relus(names, [alive, alive, woke], 0.5, 3) == (0.25, None)


def test_input_and_loss_rules():
    assert rules.input_stats(-0.05, 0.5, 0.5, 0.1, 1.0)[1] is None
    assert "already" in rules.input_stats(-0.99, 0.002, 0.5, 0.1, 1.0)[1][1]  # pixels scaled to 0..1 twice
    assert rules.input_stats(0.0, 1.01, 0.5, 0.1, 1.0)[1] is not None
    assert rules.loss_not_decreasing([2.3] * 199, 100, 0.01) == (None, None)
    value, finding = rules.loss_not_decreasing([2.0] * 100 + [1.98] * 100, 100, 0.01)
    assert value == pytest.approx(0.01) and finding is None
    value, finding = rules.loss_not_decreasing([2.0] * 100 + [1.99] * 100, 100, 0.01)
    assert value == pytest.approx(0.005) and "not decreasing" in finding[1]
    # A start above chance counts from chance: falling to the class prior is not learning.
    assert rules.loss_not_decreasing([2.5] * 100 + [2.3] * 100, 100, 0.01, chance=math.log(10))[1] is not None
    assert rules.loss_not_decreasing([2.5] * 100 + [2.27] * 100, 100, 0.01, chance=math.log(10))[1] is None


def test_evaluation_rules():
    history = [(10, 1.0, 2.0), (20, 1.1, 1.9), (30, 1.2, 1.8)]
    assert rules.overtraining(history, 3) == (None, None)
    value, finding = rules.overtraining(history + [(40, 1.3, 1.7)], 3)
    assert value == pytest.approx(0.3) and "steps 10-40" in finding[1]
    assert rules.overtraining(history + [(40, 1.3, 1.75), (50, 1.4, 1.76)], 3)[1] is None  # training loss rose
    acc = [0.8] * 9 + [0.264]
    value, finding = rules.class_accuracy(CLASS_NAMES, acc, 0.33)
    assert value == pytest.approx(0.33) and finding is None
    value, finding = rules.class_accuracy(CLASS_NAMES, [0.8] * 9 + [0.26], 0.33)
    assert "class 'truck'" in finding[1]
    assert rules.class_accuracy(CLASS_NAMES, [0.19] * 9 + [0.0], 0.33) == (None, None)  # early: quiet


# -- the monitor --------------------------------------------------------------------


def test_monitor_records_once_per_episode_and_stops_when_asked(tmp_path):
    m = monitor_lib.HealthMonitor(hp(job_dir=str(tmp_path)))
    m.check("input_stats", 0, (-1.0, 0.0), ("|mean| <= 0.5", "bad input"))
    m.check("input_stats", 100, (-1.0, 0.0), ("|mean| <= 0.5", "bad input"))  # still firing: no new record
    m.check("input_stats", 200, (0.0, 0.5), None)  # cleared
    m.check("input_stats", 300, (-1.0, 0.0), ("|mean| <= 0.5", "bad input"))
    record = json.load(open(str(tmp_path / "health.json")))
    assert [(r["rule"], r["step"], r["value"], r["action"]) for r in record] == [
        ("input_stats", 0, [-1.0, 0.0], "warn"),
        ("input_stats", 300, [-1.0, 0.0], "warn"),
    ]
    assert set(record[0]) == {"rule", "step", "value", "threshold", "action", "message"}

    stop = monitor_lib.HealthMonitor(hp(job_dir=str(tmp_path / "stop"), health_checks="stop"))
    with pytest.raises(
        monitor_lib.HealthStop,
        match=r"step 7 by the health rule dead_relus .*: dead\. Last "
        r"checkpoint: none",
    ):
        stop.check("dead_relus", 7, 0.9, ("> 0.5", "dead."))
    assert json.load(open(str(tmp_path / "stop" / "health.json")))[0]["action"] == "stop"


def test_after_evaluation_rules_fire_on_built_cases_and_write_scalars(tmp_path, monkeypatch):
    monkeypatch.setattr(rules, "OVERTRAINING_EVALS", 2)
    m = monitor_lib.HealthMonitor(hp(job_dir=str(tmp_path)))
    check = monitor_lib.EvalHealth(m, "validation")
    drawn = EvalPictures(m.hp, "validation")  # the core's pictures, beside the rules
    m.losses = [2.0] * 200
    accuracies = [0.7] * 9 + [0.1]

    def evaluate(step, val_loss, train_loss):
        m.losses.extend([train_loss] * 200)
        result = {"global_step": step, "cross_entropy": val_loss, "confusion_matrix": np.eye(10) * 50}
        result.update({"per_class_accuracy/" + n: a for n, a in zip(CLASS_NAMES, accuracies)})
        check.export(None, None, None, result, False)
        drawn.export(None, None, None, result, False)

    evaluate(100, 1.0, 1.5)
    evaluate(200, 1.1, 1.2)
    evaluate(300, 1.2, 1.0)  # validation loss up twice while training loss fell
    record = json.load(open(str(tmp_path / "health.json")))
    assert [(r["rule"], r["step"]) for r in record] == [("class_accuracy", 100), ("overtraining", 300)]
    assert "class 'truck' has accuracy 0.100 against 0.700" in record[0]["message"]

    tags = events(str(tmp_path / "eval_validation"))
    assert [s for s, _ in tags["health/validation_loss_rise"]] == [300]
    assert tags["health/worst_class_ratio"][0] == (100, pytest.approx(0.1 / 0.7))
    assert [s for s, _ in tags["pictures/confusion_matrix"]] == [100, 200, 300]


# -- probes and evaluation metrics in the graph ------------------------------------------


def test_probes_measure_the_data_gradient_without_weight_decay():
    with tf.Graph().as_default():
        v1.set_random_seed(1)
        v1.train.create_global_step()
        images = tf.random.uniform([8, 32, 32, 3], 0, 255, seed=1)
        labels = tf.constant([0, 1, 2, 3, 4, 5, 6, 7])
        params = hp(weight_decay=0.5, train_batch_size=8)
        model_fn_with([monitor_lib.HealthChecks(params)])(images, labels, MODES.TRAIN, params)
        p = probes.get()
        graph = v1.get_default_graph()
        xent = graph.get_tensor_by_name("cross_entropy:0")
        kernels = [v for v in v1.trainable_variables() if v.op.name.endswith("kernel")]
        data_grads = tf.gradients(xent, kernels)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            # One run, so the random images are the same for both.
            got, want, active = sess.run([p["tensors"]["grad_mean_abs"], data_grads, p["tensors"]["relu_active"]])
    assert p["kernel_names"][0] == "init_conv/kernel" and p["kernel_names"][-1] == "fc/kernel"
    np.testing.assert_allclose(got, [np.abs(g).mean() for g in want], rtol=1e-3, atol=1e-9)
    # ResNet-8 v1: stem, then two ReLUs per unit; channels 16, 16, 16, 32, 32, 64, 64.
    assert [a.shape[0] for a in active] == [16, 16, 16, 32, 32, 64, 64]
    assert p["relu_names"] == [
        "Relu",
        "stage1/unit1/Relu",
        "stage1/unit1/Relu_1",
        "stage2/unit1/Relu",
        "stage2/unit1/Relu_1",
        "stage3/unit1/Relu",
        "stage3/unit1/Relu_1",
    ]


@pytest.mark.parametrize("precision", [pytest.param("bf16", marks=pytest.mark.bf16_kernels), "fp16"])
def test_probes_run_in_mixed_precision(precision):
    with tf.Graph().as_default():
        v1.set_random_seed(0)  # fixed weights: fp16's first step (loss scale 2^15) is known not to overflow
        v1.train.create_global_step()
        params = hp(precision=precision, train_batch_size=4)
        images, labels = tf.random.uniform([4, 32, 32, 3], 0, 255, seed=2), tf.constant([0, 1, 2, 3])
        spec = model_fn_with([monitor_lib.HealthChecks(params)])(images, labels, MODES.TRAIN, params)
        tensors = {k: v for k, v in probes.get()["tensors"].items()}
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            _, got = sess.run([spec.train_op, tensors])
    assert got["grad_mean_abs"].dtype == np.float32 and np.isfinite(got["grad_mean_abs"]).all()
    assert np.isfinite(got["grad_norm"]) and got["grad_norm"] > 0
    assert -1 <= got["input_mean"] < 1 and 0 < got["input_std"] <= 1
    assert got["images"].dtype == np.uint8 and got["images"].shape == (4, 32, 32, 3)
    assert all(a.dtype == bool for a in got["relu_active"])


def test_dead_relus_fire_through_the_hook_when_batch_norm_shifts_everything_below_zero(tmp_path, monkeypatch):
    # A batch-norm shift of -100 (as a runaway update can leave it) silences every ReLU after it.
    monkeypatch.setattr(rules, "DEAD_RELU_WINDOW", 2)
    params = hp(job_dir=str(tmp_path), train_batch_size=8, health_every_n_steps=1)
    with tf.Graph().as_default():
        v1.train.create_global_step()
        # As the Estimator builds it: after the step's read, which the hook fetches (the step before the update).
        with tf.control_dependencies([tensor_names.global_step_read()]):
            images, guests = tf.random.uniform([8, 32, 32, 3], 0, 255, seed=3), [monitor_lib.HealthChecks(params)]
            spec = model_fn_with(guests)(images, tf.range(8), MODES.TRAIN, params)
        kill = [v1.assign(v, tf.fill(v.shape, -100.0)) for v in v1.global_variables() if v.op.name.endswith("beta")]
        monitor = monitor_lib.HealthMonitor(params)
        with v1.train.SingularMonitoredSession(hooks=[monitor_lib.HealthHook(monitor)]) as sess:
            sess.run(spec.train_op)  # step 0: healthy
            sess.raw_session().run(kill)
            sess.run(spec.train_op)  # step 1: a window of two, one batch still alive
            sess.run(spec.train_op)  # step 2: dead over the whole window
    record = json.load(open(str(tmp_path / "health.json")))
    dead = [r for r in record if r["rule"] == "dead_relus"]
    assert [(r["step"], r["value"]) for r in dead] == [(2, 1.0)], record
    assert "100% of the channels of Relu were never active over the last 2 checks" in dead[0]["message"]


def test_evaluation_metrics_confusion_matrix_and_mistakes_are_exact():
    with tf.Graph().as_default():
        v1.train.create_global_step()
        images = tf.cast(tf.reshape(tf.range(6 * 32 * 32 * 3) % 256, [6, 32, 32, 3]), tf.float32)
        labels = tf.constant([3, 1, 4, 1, 5, -1], tf.int32)
        spec = model_fn(images, labels, MODES.EVAL, hp())
        ops = spec.eval_metric_ops
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            for _ in range(2):  # two batches: the metrics accumulate
                sess.run([op for _, op in ops.values()])
            values = sess.run({k: v for k, (v, _) in ops.items()})
            classes, probs = sess.run([spec.predictions["classes"], spec.predictions["probabilities"]])
    want = np.zeros([10, 10])
    for t, c in zip([3, 1, 4, 1, 5], classes[:5]):
        want[t, c] += 2
    np.testing.assert_array_equal(values["confusion_matrix"], want)
    for c, name in enumerate(CLASS_NAMES):
        mine = [i for i in range(5) if [3, 1, 4, 1, 5][i] == c]
        expected = np.mean([classes[i] == c for i in mine]) if mine else 0.0
        assert values["per_class_accuracy/" + name] == pytest.approx(expected)
    wrong = [i for i in range(5) if classes[i] != [3, 1, 4, 1, 5][i]]
    conf = sorted([probs[i].max() for i in wrong] * 2, reverse=True)
    kept = values["mistakes/confidence"]
    np.testing.assert_allclose(kept[: len(conf)], conf, rtol=1e-6)
    assert (kept[len(conf) :] == -1).all()  # slots never filled; the padding image never counts
    first = max(wrong, key=lambda i: probs[i].max())
    np.testing.assert_array_equal(
        values["mistakes/images"][0], (np.arange(6 * 3072) % 256).reshape(6, 32, 32, 3)[first].astype(np.uint8)
    )
    assert values["mistakes/true"][0] == [3, 1, 4, 1, 5][first] and values["mistakes/predicted"][0] == classes[first]


def test_pictures_are_pngs_of_the_right_size(tmp_path):
    images = np.zeros([16, 32, 32, 3], np.uint8)
    png = pictures.batch_grid(images, list(range(10)) + [0] * 6)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and summaries._png_size(png)[0] > 500
    assert pictures.mistakes_png(images[:2], [0, 1], [1, 0], [-1.0, -1.0]) == b""  # nothing to show
    matrix = np.diag(np.arange(1, 11))
    assert pictures.confusion_png(matrix)[:4] == b"\x89PNG"


# -- logs ---------------------------------------------------------------------------------


def test_quiet_logs_drop_deprecations_and_chatter_but_keep_ours_and_other_warnings():
    record = logging.LogRecord
    quiet = logs._QuietFilter()

    def keeps(level, message, ours=False):
        r = record("tensorflow", level, __file__, 1, message, None, None)
        if ours:
            r.ours = True
        return quiet.filter(r)

    assert not keeps(logging.WARNING, "From x.py:1: RunConfig.__init__ (from y) is deprecated and will be removed")
    assert not keeps(logging.INFO, "Calling model_fn.")
    assert not keeps(logging.INFO, "loss = 2.3, step = 0")
    assert keeps(logging.WARNING, "Skipping summary for x")
    assert keeps(logging.ERROR, "anything")
    assert keeps(logging.INFO, "Saving checkpoints for 30 into /j/model.ckpt.")
    assert keeps(logging.INFO, "Evaluation [validation] at step 30", ours=True)
    assert keeps(logging.INFO, "Restoring parameters from x", ours=True)


def test_flag_errors_are_one_line_with_a_pointer_to_help():
    proc = subprocess.run(
        processes.trainer_command(["--data-dir", "x", "--health-checks", "loud"]),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-2:] == [
        "python -m estimator.cifar10_main: error: argument --health-checks: invalid choice: 'loud' "
        "(choose from 'off', 'warn', 'stop')",
        "(python -m estimator.cifar10_main --help lists the flags)",
    ]
    assert "usage:" not in proc.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--health-update-ratio-min", "1"],
            r"--health-update-ratio-min was retired in 0\.5\.0 \(the health rules' thresholds are constants behind "
            r"--health-checks; docs/health\.md\): drop it\.",
        ),
        (["--health-dead-relu-fraction", "0.5"], r"--health-dead-relu-fraction was retired in 0\.5\.0"),
        (["--health-every-n-steps", "0"], r"--health-every-n-steps 0 must be positive"),
    ],
)
def test_bad_health_thresholds_are_refused(mini_records, flags, message):
    proc = subprocess.run(
        processes.trainer_command(
            ["--data-dir", mini_records, *"--job-dir /nonexistent/never-written --num-gpus 0".split()]
        )
        + flags,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and __import__("re").search(message, proc.stderr), proc.stderr
    assert not os.path.exists("/nonexistent/never-written")


# -- end to end (slow) --------------------------------------------------------------------


@pytest.fixture(scope="module")
def blank_records(tmp_path_factory, mini_archive):
    """The mini archive with every pixel zero: a data bug the rules and preflight must catch."""
    tmp = tmp_path_factory.mktemp("blank")
    raw = {}
    for name, (data, labels) in read_archive(mini_archive).items():
        raw[name] = {b"data": np.zeros_like(data), b"labels": [int(x) for x in labels], b"batch_label": name.encode()}
    path = str(tmp / "blank.tar.gz")
    sha = ca.write_tar(path, ca.official_members(raw))
    convert(str(tmp / "data"), source=path, sha256=sha, progress=False, log=lambda *_: None)
    return str(tmp / "data")


# ResNet-8 at half width: the checks and rules decide as at full width, in under half the time.
SMALL = ["--num-gpus", "0", "--num-layers", "8", "--width-multiplier", "0.5", "--seed", "1"]


@pytest.mark.slow
def test_preflight_passes_on_real_images(mini_records, tmp_path):
    rc, out = run_joined("estimator.preflight", "--data-dir", mini_records, "--output", str(tmp_path), *SMALL)
    assert rc == 0, out
    checks = json.load(open(str(tmp_path / "preflight.json")))
    assert [c["name"] for c in checks] == [
        "label distribution (train)",
        "label distribution (validation)",
        "label distribution (eval)",
        "loss at initialisation",
        "backprop dependency",
        "overfit one batch",
        "input-independent baseline",
        "training batch picture",
    ]
    assert all(c["passed"] for c in checks) and "8 of 8 checks passed" in out
    assert "4,068 images; per class 413 427 394 402 428 379 401 411 423 390" in checks[0]["detail"]
    assert open(str(tmp_path / "training_batch.png"), "rb").read(4) == b"\x89PNG"


@pytest.mark.slow
def test_preflight_fails_the_baseline_on_blank_images(blank_records, tmp_path):
    rc, out = run_joined("estimator.preflight", "--data-dir", blank_records, "--output", str(tmp_path), *SMALL)
    assert rc == 1, out
    result = {c["name"]: c["passed"] for c in json.load(open(str(tmp_path / "preflight.json")))}
    # Blank images carry nothing to learn or memorise; the network itself is sound.
    assert [name for name, passed in result.items() if not passed] == [
        "overfit one batch",
        "input-independent baseline",
    ]
    assert "6 of 8 checks passed: FAILED overfit one batch, input-independent baseline" in out


@pytest.mark.slow
def test_every_training_rule_fires_through_the_trainer_on_a_case_built_for_it(mini_records, tmp_path, capsys):
    # Real images, thresholds no healthy run meets: the probes, rules and records are wired for each rule.
    job = str(tmp_path / "strict")
    rc, out = train_here(
        capsys,
        mini_records,
        job,
        *SMALL,
        *"--train-steps 60 --train-batch-size 32 --eval-policy final --export false --health-every-n-steps 5".split(),
        rules=dict(
            INIT_LOSS_TOLERANCE=1e-6,
            VANISHING_GRADIENT=1e3,
            EXPLODING_FACTOR=1e-3,
            UPDATE_RATIO_MIN=5,
            LOSS_WINDOW=10,
            LOSS_MIN_DECREASE=0.99,
            INPUT_MEAN_MAX=1e-6,
        ),
    )
    assert rc == 0, out[-3000:]  # warn: training went on
    record = json.load(open(os.path.join(job, "health.json")))
    fired = {r["rule"]: r["step"] for r in record if r["rule"] not in ("class_accuracy", "overtraining")}
    assert fired == {
        "init_loss": 0,
        "vanishing_gradients": 0,
        "update_ratio": 0,
        "input_stats": 0,
        "exploding_gradients": 25,
        "loss_not_decreasing": 20,
    }, record
    assert all(r["action"] == "warn" for r in record)
    assert out.count("health: step ") == len(record)


@pytest.mark.slow
def test_blank_images_stop_training_under_health_checks_stop(blank_records, tmp_path, capsys):
    job = str(tmp_path / "job")
    rc, out = train_here(
        capsys, blank_records, job, *SMALL, *"--train-steps 50 --train-batch-size 32 --health-checks stop".split()
    )
    assert rc == monitor_lib.EXIT_STATUS, out[-3000:]
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith(
            "error: training stopped at step 0 by the health rule input_stats (--health-checks stop): input "
            "statistics: the network sees mean -1.000, std 0.000"
        )
    )
    record = json.load(open(os.path.join(job, "health.json")))
    assert [(r["rule"], r["step"], r["action"]) for r in record] == [("input_stats", 0, "stop")]
    assert not os.path.exists(os.path.join(job, "results.json"))
