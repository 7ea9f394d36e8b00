"""--network airbench: the whitening layer, dirac initialisation, the network's shape, and a real run."""

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from estimator.data.pipeline import Cifar10DataSet
from estimator.networks import airbench, registry
from estimator.ops import gelu
from estimator.training.model_fn import model_fn
from tests.helpers import SMALL_AIRBENCH, hp, in_process, predict_records, train_here

v1 = tf.compat.v1


def _patches(images):
    """Every 2x2 patch of ``images / 128 - 1`` as a (row, column, channel) vector, by hand."""
    x = images / 128.0 - 1.0
    n, h, w, c = x.shape
    out = np.stack([x[:, i : i + 2, j : j + 2, :].reshape(n, 12) for i in range(h - 1) for j in range(w - 1)], 1)
    return out.reshape(-1, 12).astype(np.float64)


@pytest.mark.parametrize("eps", [None, 5e-3])
def test_whitening_kernel_decorrelates_the_patches_it_was_computed_from(mini_records, eps):
    with tf.Graph().as_default(), v1.Session() as sess:
        images = Cifar10DataSet(mini_records, "train").first_images(300)
        kernel = airbench.whitening_kernel(images, *([eps] if eps else []))
        images, kernel = sess.run([images, kernel])
    assert images.shape == (300, 32, 32, 3) and kernel.shape == (2, 2, 3, 24)
    # The second 12 filters are the first 12 negated (airbench: both signs pass the GELU).
    np.testing.assert_array_equal(kernel[..., 12:], -kernel[..., :12])
    patches = _patches(images)
    outputs = patches @ kernel.reshape(12, 24)[:, :12].astype(np.float64)
    covariance = outputs.T @ outputs / len(outputs)
    # Exactly diag(l / (l + eps)) for the eigenvalues l of the patches' covariance.
    eigenvalues = np.linalg.eigvalsh(patches.T @ patches / len(patches))
    expected = eigenvalues / (eigenvalues + (eps or 5e-4) * eigenvalues.mean())
    np.testing.assert_allclose(np.sort(np.diag(covariance)), np.sort(expected), rtol=2e-3)
    np.testing.assert_allclose(covariance - np.diag(np.diag(covariance)), 0, atol=2e-3)
    assert expected.max() > 0.99 and expected.min() < 0.9  # the eps matters only for the flattest directions
    if eps:  # ten times airbench's: the flattest direction keeps about a tenth of its variance here
        assert 0.1 < expected.min() < 0.12


def test_first_images_are_the_files_first_records_and_refuse_zero(mini_records):
    data = Cifar10DataSet(mini_records, "train")
    with tf.Graph().as_default(), v1.Session() as sess:
        first = sess.run(data.first_images(5))
        everything = sess.run(data.first_images(10**6))  # all there are
    assert first.shape == (5, 32, 32, 3) and everything.shape == (4068, 32, 32, 3)
    np.testing.assert_array_equal(first, everything[:5])
    with pytest.raises(ValueError, match="count must be positive, got 0"):
        data.first_images(0)


def test_dirac_convolution_starts_by_passing_its_input_on():
    x = np.random.RandomState(0).normal(size=(2, 8, 8, 4)).astype(np.float32)
    with tf.Graph().as_default(), v1.Session() as sess:
        kernel = airbench.dirac_initializer([3, 3, 4, 6])
        y = sess.run(tf.nn.conv2d(x, kernel, 1, "SAME"))
        k = sess.run(kernel)
    np.testing.assert_allclose(y[..., :4], x, atol=1e-6)  # identity filters
    assert np.abs(k[..., 4:]).max() <= 1 / np.sqrt(36) and np.abs(k[..., 4:]).max() > 0.05  # PyTorch's default


@pytest.mark.parametrize("shape", [[3, 3, 4, 6], [3, 3, 6, 4], [2, 2, 3, 24], [1, 1, 5, 5]])
def test_dirac_filters_are_exact_identities_at_the_centre_tap(shape):
    size, _, fan_in, filters = shape
    n = min(fan_in, filters)
    expected = np.zeros([size, size, fan_in, n], np.float32)
    for i in range(n):
        expected[size // 2, size // 2, i, i] = 1.0
    with tf.Graph().as_default(), v1.Session() as sess:
        k = sess.run(airbench.dirac_initializer(shape))
    np.testing.assert_array_equal(k[..., :n], expected)
    assert k.shape == tuple(shape) and (k[..., n:] != 0).all()  # the rest: random, no exact zeros


def test_the_training_graph_stores_no_initial_values():
    """The dirac kernels' identities are built by ops, not kept as constants: airbench96's graph
    was 12.8 MB with them (written to graph.pbtxt, the events file, every checkpoint's .meta and export)."""
    with tf.Graph().as_default() as graph:
        model = registry.build(hp(network="airbench", group_depth=3), True)
        model.forward_pass(tf.zeros([2, 32, 32, 3]))
        size = graph.as_graph_def().ByteSize()
    assert size < 200_000, size


def test_network_shape_and_parameter_count():
    # Trainable: the whitening bias (24), 3x3 kernels 24-64-64-256-256-256-256, six batch-norm
    # shifts, the 256x10 classifier; the 2x2x3x24 whitening kernel is fixed.
    trainable = 24 + 9 * (24 * 64 + 64 * 64 + 64 * 256 + 3 * 256 * 256) + 2 * (64 + 256 + 256) + 2560
    assert trainable == 1971352
    with tf.Graph().as_default():
        model = registry.build(hp(network="airbench"), True)
        logits = model.forward_pass(tf.zeros([2, 32, 32, 3]))
        assert logits.shape == (2, 10) and logits.dtype == tf.float32
        assert sum(v.shape.num_elements() for v in v1.trainable_variables()) == trainable
        fixed = [v for v in v1.global_variables() if v not in v1.trainable_variables()]
        assert [(v.op.name, v.shape.as_list()) for v in fixed if "moving" not in v.op.name] == [
            ("whiten/kernel", [2, 2, 3, 24])
        ]
        assert not [v for v in v1.global_variables() if "gamma" in v.op.name]  # batch norm without scale
    assert registry.describe(hp(network="airbench", width_multiplier=0.5)) == "airbench network x0.5 wide"
    # --group-widths names each group's filters: 3x3 kernels 24-32-32-192-192-192-192, a 192x10 classifier.
    with tf.Graph().as_default():
        registry.build(hp(network="airbench", group_widths=(32, 192, 192)), True).forward_pass(tf.zeros([2, 32, 32, 3]))
        kernels = [v.shape.as_list() for v in v1.trainable_variables() if v.op.name.endswith("kernel")]
        assert kernels == [[3, 3, 24, 32], [3, 3, 32, 32], [3, 3, 32, 192], [3, 3, 192, 192]] + [
            [3, 3, 192, 192]
        ] * 2 + [[192, 10]]
    assert registry.describe(hp(network="airbench", group_widths=(32, 192, 192))) == "airbench network 32/192/192 wide"
    assert registry.describe(hp(num_layers=14, width_multiplier=2)) == "ResNet-14 v1 x2 wide"


def test_group_depth_3_adds_airbench96s_third_convolution_inside_a_residual(tmp_path):
    from math import erf

    from estimator import resilience

    # Each group gains a 3x3 convolution of its width and a batch-norm shift: 1.36x the MACs per image.
    trainable = 1971352 + 9 * (64 * 64 + 256 * 256 + 256 * 256) + (64 + 256 + 256)
    with tf.Graph().as_default():
        model = registry.build(hp(network="airbench", group_depth=3), True)
        assert model.forward_pass(tf.zeros([2, 32, 32, 3])).shape == (2, 10)
        assert sum(v.shape.num_elements() for v in v1.trainable_variables()) == trainable == 3188440
    with tf.Graph().as_default():
        model = registry.build(hp(network="airbench", group_depth=3, width_multiplier=0.25), True)
        model.forward_pass(tf.random.uniform([2, 32, 32, 3], 0, 255, seed=3))
        acts = model.relu_outputs  # the whitening's, then per group: bn1's, bn2's, the residual's
        assert len(acts) == 10
        # GELU(z) (fused_gelu in training: IdentityN(PartitionedCall(z), z)); z = bn3 + the group's
        # first activation.
        assert all(a.op.type == "IdentityN" and a.op.inputs[0].op.type == "PartitionedCall" for a in acts)
        sums = [a.op.inputs[1] for a in acts[3::3]]
        assert all(z.op.type == "AddV2" and z.op.inputs[1] is acts[i] for z, i in zip(sums, (1, 4, 7)))
        # ... of the batch norm of the group's third convolution.
        convs = [z.op.inputs[0].op.inputs[0] for z in sums]
        assert [z.op.inputs[0].op.type for z in sums] == ["FusedBatchNormV3"] * 3
        kernels = [c.op.inputs[1].op.inputs[0].name for c in convs]  # Conv2D(x, ReadVariableOp(kernel))
        assert kernels == ["group%d/conv3/kernel:0" % g for g in (1, 2, 3)]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            values = sess.run([(z.op.inputs[0], z.op.inputs[1], a) for z, a in zip(sums, acts[3::3])])
        for bn3, shortcut, y in values:
            z = bn3 + shortcut
            np.testing.assert_allclose(y, z * 0.5 * (1 + np.vectorize(erf)(z / np.sqrt(2))), atol=1e-5)
            assert np.abs(shortcut).max() > 0.1 and np.abs(bn3).max() > 0.1  # both terms count
    assert registry.describe(hp(network="airbench", group_depth=3)) == "airbench network, 3 convolutions per group"
    # A job dir of the other depth holds other variables: refused on restart (an older job's
    # hparams.json without the field was trained with 2).
    job = tmp_path / "job"
    job.mkdir()
    (job / "hparams.json").write_text(json.dumps({"hparams": {"network": "airbench", "num_layers": 8}}))
    resilience.check_same_network(hp(network="airbench", job_dir=str(job)))
    with pytest.raises(resilience.ForeignJobDirError, match="--group-depth is 3 here, 2 in its hparams.json"):
        resilience.check_same_network(hp(network="airbench", job_dir=str(job), group_depth=3))


def test_group_depth_is_parsed_and_refused_where_it_cannot_apply(mini_records, tmp_path, capsys):
    from estimator import cifar10_main

    argv = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0"]
    assert cifar10_main.parse(argv + ["--network", "airbench"]).group_depth == 2
    assert cifar10_main.parse(argv + ["--network", "airbench", "--group-depth", "3"]).group_depth == 3
    for flags, message in [
        ("--group-depth 3", "--group-depth 3 shapes the groups of --network airbench; a ResNet's is --num-layers"),
        ("--network airbench --group-depth 4", "--group-depth: invalid choice: 4 (choose from 2, 3)"),
    ]:
        with pytest.raises(SystemExit) as e:
            cifar10_main.parse(argv + flags.split())
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert not os.path.exists(str(tmp_path / "j"))


def test_both_data_formats_compute_the_same_function():
    images = np.random.RandomState(0).uniform(0, 255, size=(3, 32, 32, 3)).astype(np.float32)

    def logits(data_format, values=None):
        with tf.Graph().as_default():
            model = registry.build(hp(network="airbench", data_format=data_format, width_multiplier=0.25), False)
            out = model.forward_pass(tf.constant(images))
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                if values is not None:
                    for var in v1.global_variables():
                        var.load(values[var.op.name], sess)
                return sess.run(out), {v.op.name: sess.run(v) for v in v1.global_variables()}

    nhwc, values = logits("channels_last")
    nchw, _ = logits("channels_first", values)
    np.testing.assert_allclose(nchw, nhwc, rtol=1e-4, atol=1e-5)
    assert np.abs(nhwc).max() > 1e-3


@pytest.mark.parametrize("training,serving", [(True, False), (False, False), (False, True)])
def test_gelu_follows_every_batch_norm(training, serving):
    # On x = batch-norm output, GELU(x) = x * Phi(x) by hand (Phi the normal CDF).
    from math import erf

    activation = "gelu"
    with tf.Graph().as_default():
        params = hp(network="airbench", width_multiplier=0.25)
        model = registry.build(params, training, serving=serving)
        model.forward_pass(tf.random.uniform([2, 32, 32, 3], 0, 255, seed=3))
        assert len(model.relu_outputs) == 7  # after the whitening and each of the six batch norms
        # GELU is fused_gelu, IdentityN(PartitionedCall(x), x) (XLA compiles the call), but in the
        # graph exports serve tf.nn.gelu's 0.5 * x * (1 + erf(x / sqrt 2)): Mul(Mul(0.5, x), ...).
        if not serving:
            assert {y.op.type for y in model.relu_outputs} == {"IdentityN"}
            pairs = [(y.op.inputs[1], y) for y in model.relu_outputs]
        else:
            pairs = [(y.op.inputs[0].op.inputs[1], y) for y in model.relu_outputs]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for x, y in sess.run(pairs):
                phi = 0.5 * (1 + np.vectorize(erf)(x / np.sqrt(2)))
                np.testing.assert_allclose(y, x * phi, atol=1e-5)
                if training:  # batch statistics (not the moving ones, fresh here): both sides are seen
                    assert (x < -0.5).any() and (x > 0.5).any()
        op_types = {op.type for op in tf.compat.v1.get_default_graph().get_operations()}
        # tf.nn.gelu's Erf is in the graph only where GELU is not fused (its XLA function is apart).
        assert ("Erf" in op_types) == serving and activation == "gelu"
        assert ("PartitionedCall" in op_types) == (not serving)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_fused_gelu_has_the_values_and_gradient_of_exact_gelu(dtype):
    # Against float64 by hand: GELU(x) = x Phi(x), GELU'(x) = Phi(x) + x phi(x). The fused kernels compute
    # in float32 (Phi as 0.5 + 0.5 erf, as tf.nn.gelu: it cancels to 0 below x = -5, an absolute error
    # under 1e-6) and round once, so in bf16 they are within half a unit in the last place (8 bits) of
    # the exact value, where tf.nn.gelu rounds after each of its ops (checked: more than that here).
    from math import erf

    x0 = np.concatenate([np.linspace(-8, 8, 161), [-40.0, 40.0, 0.0, 1e-30]]).astype(np.float32)
    dy0 = np.random.RandomState(1).uniform(0.5, 2, x0.shape).astype(np.float32)
    with tf.Graph().as_default():
        x, dy = tf.cast(x0, dtype), tf.cast(dy0, dtype)
        y, plain = gelu.fused_gelu(x), tf.nn.gelu(x)
        (grad,) = tf.gradients(y, x, dy)
        assert y.dtype == grad.dtype == dtype
        with v1.Session() as sess:
            x, dy, y, grad, plain = sess.run([tf.cast(t, tf.float64) for t in (x, dy, y, grad, plain)])
    cdf = 0.5 * (1 + np.vectorize(erf)(x / np.sqrt(2)))
    exact_y, exact_grad = x * cdf, dy * (cdf + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi))
    if dtype == tf.float32:
        np.testing.assert_allclose(y, exact_y, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(grad, exact_grad, rtol=1e-6, atol=1e-6)
    else:
        half_ulp = lambda v: 2.0 ** (np.floor(np.log2(np.maximum(np.abs(v), 1e-30))) - 8)  # noqa: E731
        for value, exact in ((y, exact_y), (grad, exact_grad), (plain, exact_y)):
            within = np.abs(value - exact) <= half_ulp(exact) * (1 + 2**-8) + 1e-6
            assert within.all() if value is not plain else not within.all()
    # x = -40, 40, 0, 1e-30: GELU 0, 40, 0, x / 2; at 40 the gradient passes dy on.
    assert y[-4:].tolist() == [0.0, 40.0, 0.0, x[-1] / 2] and grad[-3] == dy[-3]


@pytest.mark.parametrize("towers", [1, 2])
def test_model_fn_initialises_the_whitening_from_the_training_records(mini_records, towers):
    eps = airbench.WHITEN_EPS
    params = hp(network="airbench", data_dir=mini_records, width_multiplier=0.25, num_cpu_towers=towers)
    with tf.Graph().as_default():
        v1.train.create_global_step()
        images = tf.random.uniform([6, 32, 32, 3], 0, 255, seed=1)
        spec = model_fn(images, tf.constant([3, 1, 4, 1, 5, 9]), tf.estimator.ModeKeys.TRAIN, params)
        expected = airbench.whitening_kernel(Cifar10DataSet(mini_records, "train").first_images(5000), eps)
        (kernel,) = [v for v in v1.global_variables() if v.op.name == "resnet/whiten/kernel"]
        with v1.Session(config=v1.ConfigProto(device_count={"CPU": towers})) as sess:
            sess.run(v1.global_variables_initializer())
            before = sess.run(kernel)
            np.testing.assert_allclose(before, sess.run(expected), rtol=1e-5, atol=1e-6)
            sess.run(spec.train_op)
            np.testing.assert_array_equal(sess.run(kernel), before)  # fixed: not trained


@pytest.mark.parametrize(
    "flags,message",
    [
        ("--num-layers 14", "--num-layers 14 shape a ResNet; --network airbench has its own fixed layers"),
        ("--num-layers 20 --resnet-version v2", "--num-layers 20 and --resnet-version v2 shape"),
    ],
)
def test_resnet_flags_are_refused_with_airbench(mini_records, tmp_path, capsys, flags, message):
    from estimator import cifar10_main

    argv = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0", "--network", "airbench"]
    with pytest.raises(SystemExit) as e:
        cifar10_main.parse(argv + flags.split())
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not os.path.exists(str(tmp_path / "j"))


@pytest.mark.slow
def test_an_airbench_job_trains_exports_predicts_and_refuses_a_resnet_restart(mini_records, tmp_path, capsys):
    job = str(tmp_path / "job")
    code, out = train_here(
        capsys, mini_records, job, *SMALL_AIRBENCH, *"--train-steps 3 --eval-policy final --eval-tta".split()
    )
    assert code == 0, out[-3000:]
    results = json.load(open(os.path.join(job, "results.json")))
    assert results["global_step"] == 3 and 0 <= results["accuracy_tta"] <= 1
    assert json.load(open(os.path.join(job, "hparams.json")))["hparams"]["network"] == "airbench"
    assert "airbench network x0.25 wide, fp32" in out
    # The export holds the trained network: predicting the test records gives the evaluation's accuracy.
    rc, scored, err = predict_records(job, mini_records, tmp_path)
    assert rc == 0, err
    assert round(json.loads(scored)["accuracy"] * 1017) == round(results["accuracy"] * 1017)
    # ... served by TensorFlow's plain ops: the evaluation's XLA-compiled GELU is not in the export.
    exports = glob.glob(os.path.join(job, "export", "**", "saved_model.pb"), recursive=True)
    assert exports
    for path in exports:
        saved = saved_model_pb2.SavedModel()
        with open(path, "rb") as f:
            saved.ParseFromString(f.read())
        graph = saved.meta_graphs[0].graph_def
        assert "Erf" in {n.op for n in graph.node} and "PartitionedCall" not in {n.op for n in graph.node}
        assert not any("_XlaMustCompile" in f.attr for f in graph.library.function)
    from estimator import cifar10_main

    code, _, err = in_process(
        cifar10_main.main, capsys, "--data-dir", mini_records, "--job-dir", job, "--num-gpus", "0", "--train-steps", "4"
    )
    assert code == 2 and "--network is resnet here, airbench in its hparams.json" in err, err
