"""--precision: bf16 and fp16 compute, float32 variables and checkpoints, fp16 loss scaling.

fp16 is meant for GPUs; here it runs on the CPU at graph level, which is
enough to check the loss-scale variable, skipped steps and the global step.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from estimator import train
from estimator.networks.resnet import ResNetCifar10
from estimator.training.model_fn import model_fn
from tests.helpers import hp

v1 = tf.compat.v1
MODES = tf.estimator.ModeKeys


def logits_of(precision, images, values=None):
    """Inference logits of ResNet-8; ``values`` loads the same weights into another precision."""
    with tf.Graph().as_default():
        v1.set_random_seed(0)  # the same case every run: an unseeded draw failed the tolerance once here
        with v1.variable_scope("resnet"):
            model = ResNetCifar10(8, False, 0.9, 1e-5, "channels_last", precision=precision)
            logits = model.forward_pass(tf.constant(images))
        assert logits.dtype == tf.float32
        assert all(v.dtype.base_dtype == tf.float32 for v in v1.global_variables())
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            if values is None:
                # Larger classifier weights than the init's 0.01, so logits spread like a trained net's.
                fc = [v for v in v1.global_variables() if v.op.name == "resnet/fc/kernel"][0]
                fc.load(np.random.RandomState(1).normal(0, 0.5, fc.shape).astype(np.float32), sess)
            else:
                for var in v1.global_variables():
                    var.load(values[var.op.name], sess)
            return sess.run(logits), {v.op.name: sess.run(v) for v in v1.global_variables()}


@pytest.mark.bf16_kernels
def test_bf16_logits_match_fp32_logits_of_the_same_weights():
    images = np.random.RandomState(0).uniform(0, 255, size=(16, 32, 32, 3)).astype(np.float32)
    fp32, values = logits_of("fp32", images)
    bf16, _ = logits_of("bf16", images, values)
    # bf16 keeps 8 mantissa bits (relative rounding 2^-9 per op); over 8 layers the
    # logits (spread ~1.3) move by a few hundredths, and the predicted classes stay.
    assert np.std(fp32) > 0.5
    np.testing.assert_allclose(bf16, fp32, atol=0.08)
    assert (bf16.argmax(1) == fp32.argmax(1)).mean() >= 0.9
    assert np.abs(bf16 - fp32).max() > 0  # really computed in another precision


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_variables_stay_float32_and_compute_is_low_precision(precision):
    with tf.Graph().as_default():
        v1.train.create_global_step()
        model_fn(
            tf.random.uniform([6, 32, 32, 3], 0, 255),
            tf.constant([1, 2, 3, 4, 5, 6]),
            MODES.TRAIN,
            hp(precision=precision),
        )
        graph = v1.get_default_graph()
        floats = [v for v in v1.global_variables() if v.dtype.base_dtype.is_floating]
        assert floats and all(v.dtype.base_dtype == tf.float32 for v in floats)
        convs = [op for op in graph.get_operations() if op.type == "Conv2D"]
        want = {"bf16": tf.bfloat16, "fp16": tf.float16}[precision]
        assert convs and all(op.get_attr("T") == want for op in convs)
        assert graph.get_tensor_by_name("total_loss:0").dtype == tf.float32


def _fp16_step(images):
    """One fp16 training step; returns (global step, skipped steps, loss scale) after it."""
    with tf.Graph().as_default():
        step = v1.train.create_global_step()
        spec = model_fn(tf.constant(images), tf.constant([1, 2, 3, 4, 5, 6]), MODES.TRAIN, hp(precision="fp16"))
        names = {v.op.name: v for v in v1.global_variables() + v1.local_variables()}
        scale = [v for name, v in names.items() if name.endswith("current_loss_scale")][0]
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            assert sess.run(scale) == 2.0**15
            sess.run(spec.train_op)
            return sess.run([step, names["skipped_steps"], scale])


def test_fp16_good_step_updates_and_keeps_the_scale():
    images = np.random.RandomState(0).uniform(0, 255, size=(6, 32, 32, 3)).astype(np.float32)
    assert _fp16_step(images) == [1, 0, 2.0**15]


def test_fp16_overflow_skips_the_step_and_halves_the_scale():
    # 1e9 overflows float16 (max 65,504) in the first layer: gradients are not finite.
    images = np.full((6, 32, 32, 3), 1e9, np.float32)
    assert _fp16_step(images) == [0, 1, 2.0**14]


def test_fp16_with_sync_replicas_builds():
    # SyncReplicasOptimizer wraps the loss-scale optimizer (graph only: no cluster here).
    with tf.Graph().as_default():
        v1.train.create_global_step()
        spec = model_fn(
            tf.zeros([6, 32, 32, 3]),
            tf.zeros([6], tf.int32),
            MODES.TRAIN,
            hp(precision="fp16", sync=True, num_workers=2),
        )
        assert spec.train_op is not None
        # Local variables: checkpoints are the same in every precision.
        names = [v.op.name for v in v1.local_variables()]
        assert any(n.endswith("current_loss_scale") for n in names) and "skipped_steps" in names
        # Every training summary under one "train/" scope, the loss scale's too (never a "train_1/").
        summaries = {op.name for op in _summary_ops()}
        assert {"train/loss_scale", "train/skipped_steps", "train/learning_rate", "train/images"} <= summaries
        assert "train/image_size" not in summaries and not [n for n in summaries if n.startswith("train_1")]


def _summary_ops():
    return [op for op in v1.get_default_graph().get_operations() if op.type in ("ScalarSummary", "ImageSummary")]


@pytest.mark.bf16_kernels
@pytest.mark.slow
def test_checkpoints_carry_over_between_precisions(mini_records, tmp_path):
    """bf16 writes a float32 checkpoint that fp32 evaluates and fp16 and fp32 train on from."""
    job = str(tmp_path / "job")
    base = hp(data_dir=mini_records, job_dir=job, train_batch_size=8, eval_batch_size=100)

    def estimator(precision):
        config = tf.estimator.RunConfig(
            model_dir=job, tf_random_seed=1, save_summary_steps=1000, log_step_count_steps=1000
        )
        return tf.estimator.Estimator(model_fn, config=config, params=base.replace(precision=precision))

    estimator("bf16").train(train.input_fn(base, "train", seed=1), max_steps=2)
    reader = tf.train.load_checkpoint(job)
    dtypes = reader.get_variable_to_dtype_map()
    assert {dtypes[n] for n in dtypes if n != "global_step"} == {tf.float32}
    result = estimator("fp32").evaluate(train.input_fn(base, "validation"))
    assert result["global_step"] == 2 and result["eval_examples"] == 1017
    estimator("fp16").train(train.input_fn(base, "train", seed=2), max_steps=3)
    estimator("fp32").train(train.input_fn(base, "train", seed=3), max_steps=4)
    assert tf.train.load_checkpoint(job).get_tensor("global_step") == 4
    # The scalars are plain numbers that results.json can hold.
    scalars = json.loads(json.dumps({k: v for k, v in result.items() if np.ndim(v) == 0}, default=float))
    assert scalars["eval_examples"] == 1017 and scalars["global_step"] == 2
    assert result["confusion_matrix"].shape == (10, 10) and result["confusion_matrix"].sum() == 1017


def test_the_probes_measurements_travel_through_cloud_storage_and_a_bad_cache_costs_only_a_probe(gcs, tmp_path):
    """--probe-cache gs://...: what one job (or trial) measured, the next reads instead of measuring; a cache
    that cannot be written or read costs the probe again, never the job."""
    from estimator.common import machine

    calls = []

    def measure():
        calls.append(1)
        return {"train": 123.4}

    path = machine.cache_path("training_speed_probe.json", gcs + "/probe-cache")
    assert path == gcs + "/probe-cache/training_speed_probe.json"
    assert machine.cached_probe(path, "cpu|net", ("train",), measure) == ({"train": 123.4}, True)
    assert machine.cached_probe(path, "cpu|net", ("train",), measure) == ({"train": 123.4}, False)
    assert len(calls) == 1
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache's directory should be")
    unwritable = machine.cache_path("training_speed_probe.json", str(blocked))
    for _ in range(2):  # measured each time: nothing could be kept
        assert machine.cached_probe(unwritable, "cpu|net", ("train",), measure) == ({"train": 123.4}, True)
    assert len(calls) == 3
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    assert machine.cached_probe(str(garbled), "cpu|net", ("train",), measure)[1] is True


def test_the_probe_cache_is_resolved_once_and_recorded(mini_records, tmp_path):
    from estimator.training import config

    base = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0"]
    hp, _ = config.parse(base, environ={"CIFAR10_CACHE_DIR": "/srv/probes"})
    assert hp.probe_cache == "/srv/probes" and config.describe(hp)["hparams"]["probe_cache"] == "/srv/probes"
    hp, _ = config.parse(base + ["--probe-cache", "gs://b/probes"], environ={"CIFAR10_CACHE_DIR": "/srv/probes"})
    assert hp.probe_cache == "gs://b/probes"
    hp, _ = config.parse(base, environ={"HOME": str(tmp_path)})
    assert hp.probe_cache.endswith("/.cache/cifar10-resnet-estimator")
