"""Learning-rate schedules at their boundaries, and the flags that set them."""

import math
import re

import numpy as np
import pytest
import tensorflow as tf

from estimator import cifar10_main
from estimator.training import schedules


def rates(steps, **kw):
    return [float(schedules.learning_rate(s, **kw)) for s in steps]


def test_piecewise_keeps_the_old_rate_on_a_boundary_step():
    got = rates(
        [0, 164, 165, 246, 247, 600, 601], schedule="piecewise", peak=0.1, total_steps=1000, boundaries=[164, 246, 600]
    )
    np.testing.assert_allclose(got, [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.0002], rtol=1e-6)


def test_warmup_is_linear_and_reaches_the_peak_on_its_last_step():
    got = rates(
        [0, 1, 3, 4, 164, 165], schedule="piecewise", peak=0.4, total_steps=1000, warmup=4, boundaries=[164, 246, 600]
    )
    np.testing.assert_allclose(got, [0.1, 0.2, 0.4, 0.4, 0.4, 0.04], rtol=1e-6)


def test_cosine_from_the_peak_to_zero():
    kw = dict(schedule="cosine", peak=0.2, total_steps=110, warmup=10)
    got = rates([9, 10, 60, 85, 110, 200], **kw)
    want = [0.2, 0.2, 0.1, 0.2 * 0.5 * (1 + math.cos(math.pi * 0.75)), 0.0, 0.0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_onecycle_is_a_triangle():
    kw = dict(schedule="onecycle", peak=1.0, total_steps=100, warmup=20)
    np.testing.assert_allclose(
        rates([0, 9, 19, 20, 60, 99, 100], **kw), [0.05, 0.5, 1.0, 1.0, 0.5, 0.0125, 0.0], rtol=1e-6, atol=1e-9
    )


def test_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="'step' is not one of piecewise, cosine, onecycle"):
        schedules.learning_rate(0, schedule="step", peak=0.1, total_steps=10)


def test_derived_step_counts():
    assert schedules.epochs_to_steps(2, 4068, 128) == 64  # 63.56 rounded up
    assert schedules.epochs_to_steps(1, 40000, 128) == 313
    assert schedules.epochs_to_steps(1, 40000, 125) == 320  # exact: no extra step
    assert schedules.warmup_steps("onecycle", None, 1000, 40000, 128) == 200
    assert schedules.warmup_steps("cosine", None, 1000, 40000, 128) == 0
    assert schedules.warmup_steps("cosine", 0.5, 1000, 40000, 128) == 157
    assert schedules.peak_learning_rate(0.1, 512, "linear") == pytest.approx(0.4)
    assert schedules.peak_learning_rate(0.1, 512, "none") == 0.1


def parse(mini_records, tmp_path, *flags):
    return cifar10_main.parse(
        ["--data-dir", mini_records, "--job-dir", str(tmp_path / "job"), "--num-gpus", "0"] + list(flags)
    )


@pytest.mark.bf16_kernels
def test_train_epochs_and_schedule_land_in_hparams(mini_records, tmp_path):
    hp = parse(
        mini_records,
        tmp_path,
        *(
            "--train-epochs 2 --lr-schedule onecycle --train-batch-size 256.0 --lr-scaling "
            "linear --label-smoothing 0.1 --nesterov --precision bf16"
        ).split(),
    )
    # The mini archive's 4,068 training images at batch 256: 31.8 steps for 2 epochs, rounded up.
    assert (hp.train_steps, hp.train_batch_size, hp.train_epochs) == (32, 256, 2.0)
    assert (hp.lr_schedule, hp.label_smoothing, hp.nesterov, hp.precision) == ("onecycle", 0.1, True, "bf16")
    assert hp.schedule == schedules.Schedule("onecycle", pytest.approx(0.2), total_steps=32, warmup=6)


def test_defaults_keep_the_original_schedule(mini_records, tmp_path):
    hp = parse(mini_records, tmp_path)
    assert (hp.train_steps, hp.lr_schedule, hp.precision, hp.eval_policy) == (80000, "piecewise", "fp32", "periodic")
    assert hp.schedule.boundaries == (31 * 82, 31 * 123, 31 * 300)
    assert hp.schedule.values == pytest.approx([0.1, 0.01, 0.001, 0.0002])


def test_he2016_decay_steps(mini_records, tmp_path):
    hp = parse(mini_records, tmp_path, "--lr-decay-steps", "32000", "48000", "--train-steps", "64000")
    sched = hp.schedule
    assert sched.boundaries == (32000, 48000) and sched.factors == pytest.approx((0.1, 0.01))
    got = [float(sched.learning_rate(s)) for s in (32000, 32001, 48000, 48001)]
    np.testing.assert_allclose(got, [0.1, 0.01, 0.01, 0.001], rtol=1e-6)


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--lr-decay-steps", "100", "50"], "--lr-decay-steps 100 50 must be positive and increasing"),
        (["--lr-decay-steps", "100", "--lr-schedule", "cosine"], "--lr-decay-steps sets the piecewise"),
        (["--train-steps", "10", "--train-epochs", "1"], "--train-steps 10 and --train-epochs 1.0 both set"),
        (["--train-epochs", "0"], "--train-epochs 0.0 must be positive"),
        (
            ["--lr-schedule", "cosine", "--train-steps", "10", "--warmup-epochs", "1"],
            "--warmup-epochs 1.0 is 10 steps, as long as the whole run \\(10 steps\\)",
        ),
        (
            ["--lr-schedule", "onecycle", "--train-steps", "1"],
            "The run is 1 step\\(s\\) and the onecycle schedule warms up over its first 1: it would never decay. "
            "Train for at least 2 steps.",
        ),
        (["--label-smoothing", "1"], "--label-smoothing 1.0 must be in \\[0, 1\\)"),
        (["--warmup-epochs", "-1"], "--warmup-epochs -1.0 must be 0 or more"),
        (["--train-batch-size", "128.5"], "'128.5' is not a whole number"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
    ],
)
def test_bad_schedule_flags_are_refused(mini_records, tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        parse(mini_records, tmp_path, *flags)
    assert e.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_progressive_image_sizes_grow_in_steps_of_4_to_full_size_at_until():
    sizes = schedules.ImageSizes(24, 0.5, 32)
    # 24 + 16 p / 0.5 pixels, taken down to 24 + a multiple of 4: 28 from p = 0.25, 32 from 0.5 on.
    expected = {0.0: 24, 0.2499: 24, 0.25: 28, 0.4999: 28, 0.5: 32, 0.9: 32, 1.0: 32, -0.1: 24, 1.5: 32}
    assert {p: sizes.size_at(p) for p in expected} == expected
    assert sizes.changes() == [(0.0, 24), (0.25, 28), (0.5, 32)]
    assert schedules.ImageSizes(20, 0.6, 32).changes() == [
        (0.0, 20),
        (pytest.approx(0.2), 24),
        (pytest.approx(0.4), 28),
        (0.6, 32),
    ]
    assert schedules.ImageSizes(26, 0.5, 32).changes() == [(0.0, 26), (pytest.approx(1 / 3), 30), (0.5, 32)]
    assert schedules.ImageSizes(20, 1.0, 32).size_at(0.99) == 28  # full size only at the very end


def test_progressive_image_sizes_cost_their_share_of_the_pixels():
    sizes = schedules.ImageSizes(24, 0.5, 32)
    assert sizes.cost_at(0.1) == (24 / 32) ** 2 == 0.5625 and sizes.cost_at(0.3) == 0.765625
    assert sizes.cost_at(0.7) == 1.0
    # Over the whole run: a quarter at 24, a quarter at 28, half at 32.
    assert sizes.mean_cost(0.0) == pytest.approx(0.25 * 0.5625 + 0.25 * 0.765625 + 0.5)
    assert sizes.mean_cost(0.4) == pytest.approx((0.1 * 0.765625 + 0.5) / 0.6)
    assert sizes.mean_cost(0.25, 0.5) == pytest.approx(0.765625)
    assert sizes.mean_cost(0.6) == 1.0 and sizes.mean_cost(1.0) == 1.0


def test_progressive_image_sizes_in_the_graph_are_the_same_as_in_python():
    sizes = schedules.ImageSizes(20, 0.6, 32)
    grid = np.concatenate([np.linspace(-0.05, 1.05, 1101), [p for p, _ in sizes.changes()]])
    graph = schedules.ImageSizes(20, 0.6, 32).size_tensor(tf.constant(grid, tf.float64)).numpy()
    assert graph.dtype == np.int32
    assert graph.tolist() == [sizes.size_at(p) for p in grid]
    assert set(graph.tolist()) == {20, 24, 28, 32}
