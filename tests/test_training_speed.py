"""benchmarks.training_speed and its Keras networks: the same network in both frameworks, and a run of each mode."""

import json

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import keras_vs_estimator as kv
from benchmarks import training_speed
from estimator.networks import airbench

v1 = tf.compat.v1


def _ours_airbench(group_depth, images):
    """Our network's logits for ``images`` in evaluation mode, with every variable (moving statistics
    included) set to random values; returns (logits, the variables' values in creation order)."""
    rng = np.random.RandomState(1)
    with tf.Graph().as_default():
        model = airbench.AirbenchCifar10(False, 0.6, 1e-5, group_depth=group_depth)
        logits = model.forward_pass(tf.constant(images))
        variables = v1.global_variables()
        with v1.Session() as sess:
            for var in variables:
                shape = var.shape.as_list()
                # Kernels at He et al.'s scale (logits of about unit size), vectors about 0 (shifts, means) or 1.
                std = 0.2 if len(shape) == 1 else np.sqrt(2.0 / np.prod(shape[:-1]))
                value = rng.uniform(0.5, 1.5, shape) if "moving_variance" in var.name else rng.normal(0, std, shape)
                var.load(value.astype(np.float32), sess)
            return sess.run(logits), sess.run(variables), [v.name for v in variables]


@pytest.mark.parametrize("group_depth", airbench.GROUP_DEPTHS)
def test_keras_airbench_is_our_network_layer_for_layer(group_depth):
    images = np.random.RandomState(0).uniform(0, 255, [3, 32, 32, 3]).astype(np.float32)
    logits, values, names = _ours_airbench(group_depth, images)
    model = kv.keras_airbench(np.zeros([2, 2, 3, 24], np.float32), group_depth, 0.0, 0.6, 1e-5)
    # Both create their weights in the same order (whitening, then each convolution and its batch
    # norm's shift and statistics, then the classifier): the same count, shapes and values. Per group
    # 4 per convolution (its kernel; its batch norm's shift, mean and variance); whitening 2, classifier 1.
    layers = [layer for layer in model.layers if layer.weights]
    assert sum(len(layer.get_weights()) for layer in layers) == len(values) == 3 * 4 * group_depth + 3
    start = 0
    for layer in layers:
        count = len(layer.get_weights())
        layer.set_weights(values[start : start + count])
        start += count
    np.testing.assert_allclose(model(images, training=False).numpy(), logits, rtol=1e-4, atol=1e-5)
    # Ours learns the whitening's bias; Keras freezes the whitening convolution whole (24 values).
    ours_trainable = sum(v.size for v, n in zip(values, names) if "moving" not in n and "whiten/kernel" not in n)
    assert ours_trainable - sum(int(np.prod(w.shape)) for w in model.trainable_weights) == 24


def test_flops_are_counted_for_both_networks():
    resnet20, airbench94, airbench96 = (
        training_speed.forward_flops(20),
        training_speed.forward_flops(group_depth=2),
        training_speed.forward_flops(group_depth=3),
    )
    # Two per multiply-add: ResNet-20's 41M multiply-adds (He et al. 2016), airbench94's 0.24 GFLOP
    # (docs/experiments.md), and airbench96's third convolution per group 1.36x that (recipes/cpu_30min.args).
    assert 80e6 < resnet20 < 84e6
    assert 0.23e9 < airbench94 < 0.25e9
    assert airbench96 / airbench94 == pytest.approx(1.36, abs=0.01)


@pytest.mark.bf16_kernels
@pytest.mark.slow
def test_the_airbench_network_is_timed_in_both_frameworks(mini_records, tmp_path, capsys):
    out = tmp_path / "speed.json"
    argv = ["--data-dir", mini_records, "--network", "airbench", "--width-multiplier", "0.25", "--batch-sizes", "8"]
    assert training_speed.main(argv + ["--steps", "2", "--warmup", "1", "--rounds", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert "depths" not in result and list(result["networks"]) == ["airbench94 x0.25"]
    row = result["networks"]["airbench94 x0.25"]
    assert sorted(row["trainers"]) == sorted(["ours fp32", "ours bf16", "keras fp32", "keras mixed_bfloat16"])
    assert all(t["images_per_sec"] > 0 and len(t["rounds"]) == 1 for t in row["trainers"].values())
    ours, keras = row["trainers"]["ours bf16"], row["trainers"]["keras mixed_bfloat16"]
    ratio = row["ratios"]["ours bf16 / keras mixed_bfloat16"]
    assert ratio["target"] == 1.2
    # The ratio is of the unrounded speeds, the JSON's speeds are rounded to 0.1: at a few images/s (bf16
    # emulated on an AVX2-only CPU: 9.7 and 8.2) that moves their ratio by up to 0.05/9.7 + 0.05/8.2 of it.
    a, b = ours["images_per_sec"], keras["images_per_sec"]
    rounding = a / b * (0.05 / a + 0.05 / b) + 5e-4  # and the ratio's own rounding to 0.001
    assert ratio["ratio"] == pytest.approx(a / b, abs=rounding)
    printed = capsys.readouterr().out
    assert "No PyTorch version of the airbench network here" in printed and "airbench94 x0.25, batch 8" in printed


def test_a_group_depth_outside_the_networks_is_refused(capsys):
    with pytest.raises(SystemExit):
        training_speed.main(["--data-dir", "unused", "--network", "airbench", "--group-depth", "4"])
    assert "--group-depth: invalid choice: 4" in capsys.readouterr().err


def test_the_muon_cost_benchmark_times_each_variant_and_restores_the_iteration(tmp_path, capsys):
    """One timed step of each variant of a small member: a table with SGD at 1.0, JSON, and Muon's iteration and the
    whitening's data source as they were after it."""
    import json

    from benchmarks import muon_cost
    from estimator.training import model_fn as model_fn_lib
    from estimator.training import muon

    before = (muon.newton_schulz, model_fn_lib.Cifar10DataSet)
    out = str(tmp_path / "muon_cost.json")
    argv = ["--width-multiplier", "0.25", "--batch-size", "16", "--steps", "1", "--warmup", "1", "--rounds", "1"]
    assert muon_cost.main(argv + ["--out", out]) == 0
    rows = json.load(open(out))["rows"]
    assert [r["variant"] for r in rows] == ["sgd", "muon", "muon, 1-step iteration", "muon, 0-step iteration"]
    assert rows[0]["vs_sgd"] == 1.0 and all(r["secs_per_step"] > 0 for r in rows)
    assert "muon, 0-step iteration" in capsys.readouterr().out
    assert (muon.newton_schulz, model_fn_lib.Cifar10DataSet) == before
