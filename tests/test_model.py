"""ResNetCifar10, the tower function, gradient consolidation and model_fn in every mode."""

import math

import numpy as np
import pytest
import tensorflow as tf

from estimator.data.pipeline import Cifar10DataSet
from estimator.data.records import CLASS_NAMES
from estimator.networks.resnet import ResNetCifar10, check_depth
from estimator.training.model_fn import average_gradients, model_fn, split_batch, tower_fn
from tests.helpers import hp

v1 = tf.compat.v1
MODES = tf.estimator.ModeKeys


def count_params():
    return sum(v.shape.num_elements() for v in v1.trainable_variables())


@pytest.mark.parametrize(
    "depth,params,paper",
    [(20, 269722, "0.27"), (32, 464154, "0.46"), (44, 658586, "0.66"), (56, 853018, "0.85"), (110, 1727962, "1.7")],
)
def test_parameter_counts_match_he_et_al_table_6(depth, params, paper):
    with tf.Graph().as_default():
        logits = ResNetCifar10(depth, True, 0.997, 1e-5, "channels_last").forward_pass(tf.zeros([2, 32, 32, 3]))
        assert logits.shape == (2, 10)
        assert count_params() == params
    assert ("%.2f" % (params / 1e6)).startswith(paper) or "%.1f" % (params / 1e6) == paper


@pytest.mark.parametrize("depth", [0, 2, 7, 19, 21, 45, 111])
def test_depth_not_6n_plus_2_is_refused(depth):
    with pytest.raises(ValueError, match="num_layers=%d is not 6n\\+2" % depth):
        ResNetCifar10(depth, True, 0.997, 1e-5)


def test_bottleneck_depths_are_9n_plus_2():
    assert check_depth(29, "bottleneck_v2") == 3
    with pytest.raises(ValueError, match="not 9n\\+2"):
        check_depth(21, "bottleneck_v2")


def _logits_with_shared_weights(data_format, version, images, values=None):
    with tf.Graph().as_default():
        with v1.variable_scope("resnet"):
            model = ResNetCifar10(
                8 if version != "bottleneck_v2" else 11, False, 0.9, 1e-5, data_format, version=version
            )
            logits = model.forward_pass(tf.constant(images), input_data_format="channels_last")
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            if values is not None:
                for var in v1.global_variables():
                    var.load(values[var.op.name], sess)
            values = {var.op.name: sess.run(var) for var in v1.global_variables()}
            return sess.run(logits), values


@pytest.mark.parametrize("version", ["v1", "v2", "bottleneck_v2"])
def test_both_data_formats_compute_the_same_function(version):
    images = np.random.RandomState(0).uniform(0, 255, size=(3, 32, 32, 3)).astype(np.float32)
    nhwc, values = _logits_with_shared_weights("channels_last", version, images)
    nchw, _ = _logits_with_shared_weights("channels_first", version, images, values)
    assert nhwc.shape == (3, 10)
    np.testing.assert_allclose(nchw, nhwc, rtol=1e-4, atol=1e-4)


def _session_config(towers):
    return v1.ConfigProto(device_count={"CPU": towers}, allow_soft_placement=False)


@pytest.mark.parametrize("towers", [1, 2])
@pytest.mark.parametrize("mode", [MODES.TRAIN, MODES.EVAL, MODES.PREDICT])
def test_model_fn_every_mode(towers, mode):
    with tf.Graph().as_default():
        v1.train.create_global_step()
        images = tf.random.uniform([6, 32, 32, 3], 0, 255, seed=1)
        labels = tf.constant([3, 1, 4, 1, 5, -1], tf.int32) if mode != MODES.PREDICT else None
        spec = model_fn(images, labels, mode, hp(num_cpu_towers=towers))
        assert set(spec.predictions) == {"classes", "class_names", "probabilities"}
        assert spec.predictions["classes"].shape == (6,)
        assert spec.predictions["probabilities"].shape == (6, 10)
        assert (spec.train_op is not None) == (mode == MODES.TRAIN)
        if mode == MODES.PREDICT:
            assert spec.loss is None
            fetch = spec.predictions
        else:
            assert spec.loss.dtype == tf.float32 and spec.loss.shape == ()
            fetch = {"loss": spec.loss}
        if mode == MODES.EVAL:
            assert set(spec.eval_metric_ops) == {"accuracy", "cross_entropy", "eval_examples", "confusion_matrix"} | {
                "per_class_accuracy/" + n for n in CLASS_NAMES
            } | {"mistakes/" + n for n in ("confidence", "images", "true", "predicted")}
        with v1.Session(config=_session_config(towers)) as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            if mode == MODES.TRAIN:
                before = sess.run(v1.train.get_global_step())
                sess.run(spec.train_op)
                assert sess.run(v1.train.get_global_step()) == before + 1
            if mode == MODES.EVAL:
                sess.run([op for _, op in spec.eval_metric_ops.values()])
                assert sess.run(spec.eval_metric_ops["eval_examples"][0]) == 5.0  # the -1 is padding
            out = sess.run(fetch)
        if mode == MODES.PREDICT:
            np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, rtol=1e-5)
        else:
            assert np.isfinite(out["loss"])


def test_towers_and_variables_are_placed_as_asked():
    with tf.Graph().as_default():
        v1.train.create_global_step()
        model_fn(
            tf.zeros([4, 32, 32, 3]), tf.zeros([4], tf.int32), MODES.TRAIN, hp(num_cpu_towers=2, train_batch_size=4)
        )
        graph = tf.compat.v1.get_default_graph()
        variables = [op for op in graph.get_operations() if op.type == "VarHandleOp" and op.name.startswith("resnet/")]
        assert variables and all(op.device.endswith("CPU:0") for op in variables)
        convs = [op for op in graph.get_operations() if op.type == "Conv2D"]
        assert {op.name.split("/")[0] for op in convs if op.device.endswith("CPU:1")} == {"tower_1"}
        assert {op.name.split("/")[0] for op in convs if op.device.endswith("CPU:0")} == {"tower_0"}


def test_gpu_strategy_spreads_variables_evenly_over_gpus():
    # Graph construction only: placement can be checked without GPUs.
    with tf.Graph().as_default():
        v1.train.create_global_step()
        model_fn(
            tf.zeros([4, 32, 32, 3]),
            tf.zeros([4], tf.int32),
            MODES.TRAIN,
            hp(num_gpus=2, variable_strategy="GPU", train_batch_size=4, data_format="channels_first"),
        )
        load = {}
        for op in tf.compat.v1.get_default_graph().get_operations():
            # Momentum slots follow their variables; the placer balances the variables.
            if op.type == "VarHandleOp" and op.name.startswith("resnet/") and "Momentum" not in op.name:
                size = tf.TensorShape(op.get_attr("shape")).num_elements() * 4
                load[op.device] = load.get(op.device, 0) + size
        assert sorted(load) == ["/device:GPU:0", "/device:GPU:1"]
        small, large = sorted(load.values())
        assert large - small <= 64 * 64 * 9 * 4  # within one of the largest kernels


def test_two_tower_gradient_equals_one_tower_gradient():
    rng = np.random.RandomState(0)
    images = tf.constant(rng.uniform(0, 255, size=(8, 32, 32, 3)).astype(np.float32))
    labels = tf.constant(rng.randint(0, 10, size=8).astype(np.int32))
    with tf.Graph().as_default():
        images = tf.constant(rng.uniform(0, 255, size=(8, 32, 32, 3)).astype(np.float32))
        labels = tf.constant(rng.randint(0, 10, size=8).astype(np.int32))

        def build(shards, reuse):
            outs = []
            for i, (x, y) in enumerate(zip(split_batch(images, shards), split_batch(labels, shards))):
                with v1.variable_scope("resnet", reuse=reuse or i > 0):
                    # Inference-mode batch norm: the function does not depend on the shard.
                    model = ResNetCifar10(8, False, 0.9, 1e-5, "channels_last")
                    outs.append(tower_fn(model, x, y, weight_decay=2e-4).grads_and_vars)
            return average_gradients(outs)

        one, two = build(1, False), build(2, True)
        assert [v.name for _, v in one] == [v.name for _, v in two]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            g1, g2 = sess.run([[g for g, _ in one], [g for g, _ in two]])
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert any(np.abs(a).max() > 1e-3 for a in g1)  # gradients that mean something


def test_split_batch_uneven_sizes():
    with tf.Graph().as_default(), v1.Session() as sess:
        unknown = v1.placeholder(tf.int32, [None])
        static, dynamic = split_batch(tf.range(7), 3), split_batch(unknown, 3)
        # A batch of known size gives shards of known sizes (training batches; filter_gradient needs them).
        assert [p.shape.as_list() for p in static] == [[3], [2], [2]]
        assert [p.shape.as_list() for p in dynamic] == [[None]] * 3
        parts, fed = sess.run([static, dynamic], {unknown: np.arange(7)})
    assert [p.tolist() for p in parts] == [p.tolist() for p in fed] == [[0, 1, 2], [3, 4], [5, 6]]


def test_loss_at_initialisation_is_ln_10(mini_records):
    # Karpathy's first check: with 10 classes and no knowledge, the loss is -ln(1/10).
    # Seeded: over 12 seeds the gap to ln 10 on these 200 images had a spread
    # of 0.013 (largest 0.032), so 0.05 holds whatever the machine's kernels.
    with tf.Graph().as_default():
        v1.set_random_seed(0)
        images, labels = Cifar10DataSet(mini_records, "eval").make_batch(200)
        with v1.variable_scope("resnet"):
            model = ResNetCifar10(20, True, 0.997, 1e-5, "channels_last")
            out = tower_fn(model, images, labels, 2e-4, compute_gradients=False)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            xent = sess.run(out.cross_entropy)
    assert abs(xent - math.log(10)) < 0.05, xent


def test_learning_rate_schedule_exact_boundaries():
    # 50,000 images at batch 128: 390 steps per epoch, the paper's setting.
    paper = hp(num_train_examples=50000, train_batch_size=128).schedule
    assert paper.boundaries == (390 * 82, 390 * 123, 390 * 300)
    np.testing.assert_allclose(paper.values, [0.1, 0.01, 0.001, 0.0002])
    # Small data and batches decay too: the mini set's 4,068 images at batch 128.
    assert hp(num_train_examples=4068, train_batch_size=128).schedule.boundaries == (31 * 82, 31 * 123, 31 * 300)
    # Synchronous workers take one step per worker-batch group; asynchronous ones a step each.
    cluster = dict(num_train_examples=40000, train_batch_size=128, num_workers=4)
    assert hp(sync=True, **cluster).schedule.boundaries[0] == 78 * 82
    assert hp(sync=False, **cluster).schedule.boundaries[0] == 312 * 82
    assert hp(num_train_examples=10, train_batch_size=128).schedule.boundaries == (82, 123, 300)


def test_learning_rate_decays_in_the_graph():
    with tf.Graph().as_default():
        step = v1.train.create_global_step()
        v1.train.get_or_create_global_step()
        spec = model_fn(
            tf.zeros([2, 32, 32, 3]),
            tf.zeros([2], tf.int32),
            MODES.TRAIN,
            hp(num_cpu_towers=1, train_batch_size=2, num_train_examples=4),
        )
        lr = tf.compat.v1.get_default_graph().get_tensor_by_name("learning_rate:0")
        assert spec.train_op is not None
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            got = []
            # 2 steps per epoch: boundaries 164, 246, 600; a boundary step keeps the old rate.
            for s in (0, 164, 165, 246, 247, 600, 601):
                step.load(s, sess)
                got.append(sess.run(lr))
    np.testing.assert_allclose(got, [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.0002], rtol=1e-6)


# bf16 with channels_first is a GPU combination: TensorFlow's CPU depthwise
# convolution in bf16 takes NHWC only.
@pytest.mark.parametrize(
    "data_format,precision", [("channels_last", "fp32"), ("channels_first", "fp32"), ("channels_last", "bf16")]
)
def test_average_pool_is_exact_on_computed_inputs(data_format, precision):
    # TF 2.15's oneDNN AvgPool returned wrong values about one graph in three
    # on inputs computed in the same graph; several fresh graphs expose that.
    from estimator.networks.layers import COMPUTE_DTYPES, ResNet

    dtype = COMPUTE_DTYPES[precision]
    x = np.random.RandomState(0).randn(4, 16, 16, 8).astype(np.float32)
    # bf16 rounds the inputs (8-bit mantissa) and the mean of four: 2 * 2^-8 relative at most.
    rounded = x if precision == "fp32" else tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy()
    want = np.maximum(rounded, 0).reshape(4, 8, 2, 8, 2, 8).mean(axis=(2, 4))
    tol = 1e-6 if precision == "fp32" else 2**-7
    for _ in range(6):
        with tf.Graph().as_default():
            net = ResNet(False, data_format, 0.9, 1e-5, precision)
            inputs = tf.cast(tf.nn.relu(tf.Variable(x)), dtype)
            if data_format == "channels_first":
                inputs = tf.transpose(inputs, [0, 3, 1, 2])
            pooled = net._avg_pool(inputs, 2, 2)
            assert pooled.dtype == dtype
            if data_format == "channels_first":
                pooled = tf.transpose(pooled, [0, 2, 3, 1])
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                got = sess.run(tf.cast(pooled, tf.float32))
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_flip_tta_accuracy_against_a_hand_computed_case():
    """On images that are not mirror-symmetric: TTA's prediction is argmax(p(x) + p(mirror x)),
    computed here from the network's own probabilities of each view, and differs from the plain one."""
    # Two colours per image, split off-centre (12 and 20 columns): the mirror is another image.
    left, right = np.random.RandomState(2).uniform(0, 255, (2, 30, 1, 1, 3))
    images = np.concatenate(
        [np.broadcast_to(left, (30, 32, 12, 3)), np.broadcast_to(right, (30, 32, 20, 3))], axis=2
    ).astype(np.float32)
    with tf.Graph().as_default():
        v1.set_random_seed(3)  # fixed weights: a case computed once, the same every run
        v1.train.create_global_step()
        x = v1.placeholder(tf.float32, [30, 32, 32, 3])
        y = v1.placeholder(tf.int32, [30])
        spec = model_fn(x, y, MODES.EVAL, hp(eval_flip_tta=True, eval_batch_size=30))
        plain, tta = spec.eval_metric_ops["accuracy"], spec.eval_metric_ops["accuracy_flip_tta"]
        # A second, reused set of towers: no new variables.
        assert len(v1.trainable_variables()) == count_params_of(8)
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            fc = [v for v in v1.global_variables() if v.op.name == "resnet/fc/kernel"][0]
            # Large last-layer weights without a common part (columns of mean 0): the differences
            # between the views' features, not their shared positive mean, pick the top class.
            weights = np.random.RandomState(1).normal(0, 20.0, fc.shape)
            fc.load((weights - weights.mean(axis=0)).astype(np.float32), sess)
            probabilities = spec.predictions["probabilities"]
            p = sess.run(probabilities, {x: images})
            q = sess.run(probabilities, {x: images[:, :, ::-1]})  # the mirror images (width axis)
            tta_classes, plain_classes = np.argmax(p + q, axis=1), np.argmax(p, axis=1)
            disagree = int(np.sum(tta_classes != plain_classes))
            assert 0 < disagree < 30  # the case tells the two metrics apart
            # Labels chosen so that TTA is right on every image and the plain prediction only
            # where the two agree: 1.0 against (30 - disagree) / 30.
            sess.run([plain[1], tta[1]], {x: images, y: tta_classes})
            assert sess.run(tta[0]) == 1.0
            assert sess.run(plain[0]) == pytest.approx((30 - disagree) / 30)


def count_params_of(depth):
    """Trainable variables of a v1 ResNet: 3 per conv+bn pair, 2 for the classifier."""
    units = (depth - 2) // 6 * 3
    return 3 + units * 2 * 3 + 2
