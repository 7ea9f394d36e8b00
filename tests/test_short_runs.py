"""What short runs use: weight averages in evaluation and exports, flip-and-translate TTA, training on
two splits, the width multiplier, zero-initialised residual units and progressive resizing."""

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from estimator import cifar10_main
from estimator.data import records as fmt
from estimator.data.pipeline import Cifar10DataSet
from estimator.networks import registry
from estimator.networks.resnet import ResNetCifar10
from estimator.training import schedules
from estimator.training.model_fn import IMAGE_SIZE, LOOKAHEAD_MAX_PULL, apply_lookahead, model_fn, resized_for_training
from tests.helpers import SMALL_AIRBENCH, events, hp, train_here

v1 = tf.compat.v1
MODES = tf.estimator.ModeKeys


def test_lookahead_meets_the_slow_copy_every_fifth_step_by_hand():
    with tf.Graph().as_default():
        step = v1.train.create_global_step()
        weights = v1.get_variable("w", initializer=tf.constant([1.0, -2.0]))
        train = tf.group(v1.assign_add(weights, [1.0, 0.5]), v1.assign_add(step, 1))  # a fixed "update"
        train_op = apply_lookahead(train, [weights], step, lambda s: tf.cast(s, tf.float64) / 20)
        slow_copy = [v for v in v1.global_variables() if v.op.name == "w/Lookahead"][0]
        fast, slow = np.array([1.0, -2.0]), np.array([1.0, -2.0])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for k in range(1, 13):
                sess.run(train_op)
                fast = fast + [1.0, 0.5]
                if k % 5 == 0:  # 20 steps in all: the pull is 0.95^5 x (k / 20)^3
                    pull = 0.95**5 * (k / 20.0) ** 3
                    fast = slow = slow + (1 - pull) * (fast - slow)
                np.testing.assert_allclose(sess.run(weights), fast, rtol=1e-6)
                np.testing.assert_allclose(sess.run(slow_copy), slow, rtol=1e-6)
    assert LOOKAHEAD_MAX_PULL == 0.95**5 and not np.allclose(fast, [13.0, 4.0])  # it did pull back


def test_model_fn_syncs_every_weight_and_statistic_with_lookahead():
    params = hp(lookahead=True, train_steps=10, learning_rate=0.5)
    images = np.random.RandomState(0).uniform(0, 255, (6, 32, 32, 3)).astype(np.float32)
    with tf.Graph().as_default():
        v1.set_random_seed(1)
        v1.train.create_global_step()
        spec = model_fn(tf.constant(images), tf.constant([0, 1, 2, 3, 4, 5]), MODES.TRAIN, params)
        slow = {v.op.name[: -len("/Lookahead")]: v for v in v1.global_variables() if v.op.name.endswith("/Lookahead")}
        watched = {v.op.name: v for v in v1.trainable_variables() + v1.moving_average_variables()}
        assert set(slow) == set(watched) and "resnet/fc/kernel" in slow
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            initial = sess.run(watched)
            for k in range(1, 7):
                sess.run(spec.train_op)
                now, copies = sess.run(watched), sess.run(slow)
                if k < 5:  # not synced yet: the slow copies are the initial weights
                    assert all(np.array_equal(copies[n], initial[n]) for n in slow)
                elif k == 5:  # just synced: weights and copies equal
                    assert all(np.array_equal(copies[n], now[n]) for n in slow)
                else:  # a step later the kernels moved on
                    assert not np.array_equal(copies["resnet/fc/kernel"], now["resnet/fc/kernel"])


@pytest.mark.parametrize("fraction", [1.0, 0.25])
def test_tta_accuracy_against_a_hand_computed_case(fraction):
    """argmax of 1/4 p(x) + 1/4 p(mirror x) + 1/8 of each shifted view and its mirror (flip TTA: of the first
    two); with --tta-fraction 0.25 for the 6 of the 24 real images whose top plain probability is lowest,
    the plain argmax for the rest, and never for the 6 padding images (label -1) of the batch."""
    left, right = np.random.RandomState(2).uniform(0, 255, (2, 30, 1, 1, 3))
    images = np.concatenate(
        [np.broadcast_to(left, (30, 32, 12, 3)), np.broadcast_to(right, (30, 32, 20, 3))], axis=2
    ).astype(np.float32)
    images[:, :8, :8, :] = 255.0  # a corner too, so that shifts move something
    with tf.Graph().as_default():
        v1.set_random_seed(3)
        v1.train.create_global_step()
        x = v1.placeholder(tf.float32, [30, 32, 32, 3])
        y = v1.placeholder(tf.int32, [30])
        params = hp(eval_tta=True, eval_flip_tta=True, eval_batch_size=30, tta_fraction=fraction)
        params = params.replace(eval_examples={fmt.TEST: 1000, fmt.VALIDATION: 1017})
        assert params.evaluation_images() == (2017, [("flip", 1000 * fraction), ("translations", 4000 * fraction)])
        spec = model_fn(x, y, MODES.EVAL, params)
        metrics = [spec.eval_metric_ops[k] for k in ("accuracy", "accuracy_flip_tta", "accuracy_tta")]
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            fc = [v for v in v1.global_variables() if v.op.name == "resnet/fc/kernel"][0]
            weights = np.random.RandomState(1).normal(0, 20.0, fc.shape)
            fc.load((weights - weights.mean(axis=0)).astype(np.float32), sess)

            def p(view):
                return sess.run(spec.predictions["probabilities"], {x: view})

            padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)])
            shifted = [padded[:, :32, :32], padded[:, 2:, 2:]]
            mirror = lambda a: a[:, :, ::-1]  # noqa: E731
            flip_mean = 0.5 * (p(images) + p(mirror(images)))
            mean = 0.5 * flip_mean
            for view in shifted:
                mean += 0.125 * (p(view) + p(mirror(view)))
            plain_classes = np.argmax(p(images), axis=1)
            chosen = np.argsort(p(images)[:24].max(axis=1))[: int(24 * fraction)]  # 6 of 24: 8 of 32 real
            tta_classes, flip_classes = plain_classes.copy(), plain_classes.copy()
            tta_classes[chosen], flip_classes[chosen] = np.argmax(mean, 1)[chosen], np.argmax(flip_mean, 1)[chosen]
            disagree = int(np.sum(tta_classes[:24] != plain_classes[:24]))
            assert 0 < disagree < 24
            labels = np.concatenate([tta_classes[:24], [-1] * 6])
            sess.run([m[1] for m in metrics], {x: images, y: labels})
            accuracy, flip, tta = sess.run([m[0] for m in metrics])
            assert tta == 1.0 and accuracy == pytest.approx((24 - disagree) / 24)
            assert flip == pytest.approx(np.mean(flip_classes[:24] == tta_classes[:24]))


def test_training_on_two_splits_reads_both_once_per_epoch(mini_records, tmp_path):
    both = Cifar10DataSet(mini_records, fmt.TRAIN, use_distortion=False, seed=1, also=(fmt.VALIDATION,))
    assert both.num_examples_per_epoch() == 4068 + 1017
    labels = np.concatenate([y.numpy() for _, y in both.dataset(5085).take(1)])

    def split_labels(subset, batches):
        data = Cifar10DataSet(mini_records, subset, use_distortion=False)
        return np.concatenate([y.numpy() for _, y in data.dataset(1017).take(batches)])

    # One epoch of each: the training split repeats (4 batches of 1,017 are its 4,068 images).
    expected = np.concatenate([split_labels(fmt.TRAIN, 4), split_labels(fmt.VALIDATION, 1)])
    assert np.array_equal(np.bincount(labels, minlength=10), np.bincount(expected[expected >= 0], minlength=10))
    parsed = cifar10_main.parse(
        [
            "--data-dir",
            mini_records,
            "--job-dir",
            str(tmp_path / "j"),
            *"--num-gpus 0 --train-subsets train validation".split(),
        ]
    )
    assert parsed.train_subsets == ("train", "validation") and parsed.num_train_examples == 5085
    assert parsed.eval_policy == "final" and not parsed.validates
    with pytest.raises(ValueError, match="only training reads several subsets"):
        Cifar10DataSet(mini_records, fmt.TEST, also=(fmt.VALIDATION,))


@pytest.mark.parametrize("width,filters", [(1, [16, 16, 32, 64]), (1.5, [24, 24, 48, 96]), (0.5, [8, 8, 16, 32])])
def test_width_multiplier_scales_every_layer(width, filters):
    model = ResNetCifar10(8, True, 0.9, 1e-5, "channels_last", width_multiplier=width)
    assert model.filters == filters
    with tf.Graph().as_default():
        logits = model.forward_pass(tf.zeros([2, 32, 32, 3]))
        assert logits.shape == (2, 10)
        kernel = [v for v in v1.global_variables() if v.op.name.endswith("stage3/unit1/conv1/kernel")][0]
        assert kernel.shape == (3, 3, filters[2], filters[3])


@pytest.mark.parametrize("width", [0, -1, 1.3, 0.1])
def test_widths_the_shortcut_cannot_pad_are_refused(width):
    with pytest.raises(ValueError, match="width multiplier %s must be positive with 8 x it a whole number" % width):
        ResNetCifar10(8, True, 0.9, 1e-5, "channels_last", width_multiplier=width)


@pytest.mark.parametrize("network", ["airbench", "resnet"])
def test_the_networks_take_images_of_any_size_from_16_pixels(network):
    with tf.Graph().as_default():
        x = v1.placeholder(tf.float32, [None, None, None, 3])
        logits = registry.build(hp(network=network), True).forward_pass(x)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for side in (16, 20, 24, 28, 32):
                images = np.random.RandomState(side).uniform(0, 255, (2, side, side, 3))
                out = sess.run(logits, {x: images})
                assert out.shape == (2, 10) and np.all(np.isfinite(out))


def test_resizing_for_training_averages_neighbours_and_leaves_full_size_alone():
    ramp = np.broadcast_to(np.arange(32, dtype=np.float32)[None, None, :, None], (2, 32, 32, 3))
    with tf.Graph().as_default():
        side = v1.placeholder(tf.int32, [])
        out = resized_for_training(tf.constant(ramp), side)
        assert out.shape.as_list() == [2, None, None, 3]
        with v1.Session() as sess:
            half = sess.run(out, {side: 16})
            assert sess.run(out, {side: 32}).tolist() == ramp.tolist()
    # Output pixel j covers input pixels 2j and 2j + 1 and is centred at 2j + 0.5: a symmetric filter
    # keeps a ramp a ramp there (at the borders the filter is cut off and renormalised).
    assert half.shape == (2, 16, 16, 3)
    np.testing.assert_allclose(half[0, 5, 1:15, 0], 2 * np.arange(1, 15) + 0.5, atol=1e-4)
    np.testing.assert_allclose(half[:, :, 1:15, :], np.broadcast_to(half[:1, :1, 1:15, :1], (2, 16, 14, 3)), atol=1e-4)
    assert 0 <= half.min() and half.max() <= 31


def test_model_fn_trains_each_step_at_its_size_and_evaluates_at_full_size():
    params = hp(progressive_resize=16, progressive_resize_until=0.5, train_steps=8)
    expected = [schedules.ImageSizes(16, 0.5, 32).size_at(s / 8) for s in range(8)]
    assert expected == [16, 20, 24, 28, 32, 32, 32, 32]
    images = np.random.RandomState(0).uniform(0, 255, (6, 32, 32, 3)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        v1.train.create_global_step()
        spec = model_fn(tf.constant(images), tf.constant([0, 1, 2, 3, 4, 5]), MODES.TRAIN, params)
        first_conv = [op for op in graph.get_operations() if op.type == "Conv2D" and op.name.startswith("tower_0/")]
        seen = first_conv[0].inputs[0]
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            got = []
            for _ in range(8):
                size, tower_input, _ = sess.run([IMAGE_SIZE, seen, spec.train_op])
                got.append((int(size), tower_input.shape[1:3]))
        assert got == [(s, (s, s)) for s in expected]
    with tf.Graph().as_default() as graph:
        v1.train.create_global_step()
        model_fn(tf.constant(images), tf.constant([0, 1, 2, 3, 4, 5]), MODES.EVAL, params)
        assert not [op for op in graph.get_operations() if "resize" in op.type.lower() or "Scale" in op.type]


@pytest.mark.slow
def test_a_progressively_resized_final_model_on_train_and_validation_logs_its_sizes_and_says_so(
    mini_records, tmp_path, capsys
):
    job = str(tmp_path / "job")
    flags = (
        "--train-steps 12 --lr-schedule onecycle --learning-rate 0.1 --eval-policy final --log-every-n-steps 1 "
        "--seed 1 --progressive-resize 20 --progressive-resize-until 0.5 --eval-tta --train-subsets train validation"
    )
    code, out = train_here(capsys, mini_records, job, *SMALL_AIRBENCH, *flags.split())
    assert code == 0, out[-3000:]
    recorded = json.load(open(os.path.join(job, "hparams.json")))["hparams"]
    assert recorded["progressive_resize"] == 20 and recorded["progressive_resize_until"] == 0.5
    results = json.load(open(os.path.join(job, "results.json")))
    assert results["global_step"] == 12 and 0 <= results["accuracy"] <= 1
    # The summary written at global step s is of the step that counted it: the size at progress (s - 1) / 12.
    sizes = dict(events(job)["train/image_size"])
    assert sizes == {s: schedules.ImageSizes(20, 0.5, 32).size_at((s - 1) / 12) for s in sizes}
    assert sorted(sizes) == list(range(1, 13))
    assert set(sizes.values()) == {20, 24, 28, 32}
    # A final model: the validation split was training data, so no validation, and no best export.
    assert results["validation_accuracy"] is None and results["validation_examples"] == 0
    assert "validation split was training data" in results["validation_note"]
    assert results["train_subsets"] == ["train", "validation"] and results["eval_examples"] == 1017
    assert 0 <= results["accuracy_tta"] <= 1
    assert not glob.glob(os.path.join(job, "export", "best", "*")) and glob.glob(
        os.path.join(job, "export", "final", "*")
    )
    assert "Evaluation [validation]" not in out


def test_progressive_resize_and_tta_fraction_flags_are_checked(mini_records, tmp_path, capsys):
    argv = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0"]
    parsed = cifar10_main.parse(argv + ["--progressive-resize", "24"])
    assert parsed.image_sizes == schedules.ImageSizes(24, 0.5, 32)
    assert cifar10_main.parse(argv).image_sizes is None
    for flags, message in [
        ("--progressive-resize 12", "--progressive-resize 12 must be from 16 to 31 pixels a side, e.g. 24 (0: off)"),
        ("--progressive-resize 32", "--progressive-resize 32 must be from 16 to 31 pixels a side"),
        ("--progressive-resize 24 --progressive-resize-until 0", "--progressive-resize-until 0.0 must be a fraction"),
        ("--progressive-resize 24 --progressive-resize-until 1.5", "--progressive-resize-until 1.5 must be a fraction"),
        (
            "--progressive-resize-until 0.7",
            "--progressive-resize-until 0.7 needs --progressive-resize SIZE: give one or drop it",
        ),
        ("--progressive-resize 2x", "argument --progressive-resize: '2x' is not an integer"),
        ("--eval-tta --tta-fraction 0", "--tta-fraction 0.0 must be a fraction of each batch in (0, 1], e.g. 0.25"),
        ("--tta-fraction 0.25", "--tta-fraction 0.25 needs --eval-flip-tta or --eval-tta: add one or drop it"),
    ]:
        with pytest.raises(SystemExit) as e:
            cifar10_main.parse(argv + flags.split())
        assert e.value.code == 2 and message in capsys.readouterr().err, flags
    assert not os.path.exists(str(tmp_path / "j"))
