"""bf16 filter gradients as matrix products: TensorFlow's values, and chosen per shape by measurement."""

import json

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import filter_gradient_speed
from estimator.common import machine
from estimator.networks import registry
from estimator.ops import filter_gradient as fg
from tests.helpers import hp

v1 = tf.compat.v1


def _by_hand(x, dy, k):
    """dW[a, b, i, o] = sum over n, h, w of x_padded[n, h + a, w + b, i] * dy[n, h, w, o]."""
    n, height, width, _ = x.shape
    p = k // 2
    padded = np.pad(x, [(0, 0), (p, p), (p, p), (0, 0)])
    out = np.zeros((k, k, x.shape[3], dy.shape[3]))
    for a in range(k):
        for b in range(k):
            for h in range(height):
                for w in range(width):
                    out[a, b] += padded[:, h + a, w + b, :].T @ dy[:, h, w, :]
    return out


@pytest.mark.parametrize("shape,k", [((3, 5, 4, 6), 3), ((2, 4, 7, 3), 5), ((2, 1, 1, 4), 3)])
def test_filter_gradient_matmuls_are_the_convolutions_kernel_gradient(shape, k):
    rng = np.random.RandomState(0)
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape[:3] + (5,))
    with tf.Graph().as_default(), v1.Session() as sess:
        ours = fg.filter_gradient_matmuls(tf.constant(x), tf.constant(dy), k)
        native = tf.raw_ops.Conv2DBackpropFilter(
            input=tf.constant(x),
            filter_sizes=[k, k, shape[3], 5],
            out_backprop=tf.constant(dy),
            strides=[1, 1, 1, 1],
            padding="SAME",
        )
        ours, native = sess.run([ours, native])
    assert ours.shape == (k, k, shape[3], 5)
    np.testing.assert_allclose(ours, _by_hand(x, dy, k), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours, native, rtol=1e-9, atol=1e-12)
    assert np.abs(ours).max() > 0.5


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_the_convolution_has_tensorflows_values_and_gradients(dtype):
    rng = np.random.RandomState(1)
    # Inputs rounded to ``dtype`` first, so float64 on the same values is the exact answer.
    x0, kernel0, weights0 = (
        tf.cast(tf.cast(rng.standard_normal(shape), dtype), tf.float64).numpy()
        for shape in ((4, 6, 6, 16), (3, 3, 16, 8), (4, 6, 6, 8))
    )
    with tf.Graph().as_default(), v1.Session() as sess:
        x, kernel, weights = (tf.cast(v, dtype) for v in (x0, kernel0, weights0))
        ours, plain = fg.conv2d_matmul_gradient(x, kernel), tf.nn.conv2d(x, kernel, 1, "SAME")
        # The loss sum(y * weights): dy = weights, not uniform.
        grads = [tf.gradients(tf.reduce_sum(tf.cast(y * weights, tf.float32)), [x, kernel]) for y in (ours, plain)]
        ops = {op.type for op in v1.get_default_graph().get_operations()}
        (ours, plain), ((dx, dk), (plain_dx, plain_dk)) = sess.run([(ours, plain), grads])
    assert ours.dtype == dk.dtype == dx.dtype == dtype.as_numpy_dtype
    np.testing.assert_array_equal(ours, plain)
    np.testing.assert_array_equal(dx, plain_dx)  # the input's gradient is TensorFlow's own
    assert "Conv2DBackpropFilter" in ops  # the plain convolution's, beside the matrix products
    exact = _by_hand(x0, weights0, 3)
    dk, plain_dk = dk.astype(np.float64), plain_dk.astype(np.float64)
    if dtype == tf.float32:
        np.testing.assert_allclose(dk, exact, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(plain_dk, exact, rtol=1e-5, atol=1e-5)
    else:
        # Sums of 144 products accumulated in float32 and rounded once: within a unit in the last
        # place of bf16 (8 bits). (TensorFlow's own kernel is not, here: off by up to 0.55 on values up
        # to 38 in this case, by 16 on 740 at batch 512 on 7x7 maps with 256 channels; docs/speed.md.)
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(exact), 1e-30))) - 7)
        assert (np.abs(dk - exact) <= ulp).all() and np.abs(exact).max() > 10


CANDIDATE = dict(
    x_shape=(512, 8, 8, 256),
    kernel_shape=(3, 3, 256, 256),
    dtype=tf.bfloat16,
    strides=1,
    padding="SAME",
    data_format="NHWC",
)


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"dtype": tf.float32},  # native faster in float32 on the Xeon where bf16's matrix products pay
        {"strides": 2},
        {"padding": "VALID"},
        {"data_format": "NCHW"},
        {"x_shape": (512, 8, 8, 64), "kernel_shape": (3, 3, 64, 256)},  # narrow: native faster
        {"x_shape": (512, 9, 8, 256)},  # 72 positions
        {"kernel_shape": (2, 2, 256, 256)},  # even: SAME pads one side only
        {"x_shape": (None, 8, 8, 256)},
        {"x_shape": (512, 8, None, 256)},
    ],
)
def test_only_wide_stride_1_bf16_convolutions_on_small_maps_are_candidates(change):
    assert fg.is_candidate(**dict(CANDIDATE, **change)) == (not change)
    assert fg.is_candidate(**dict(CANDIDATE, x_shape=(2, 8, 8, 128), kernel_shape=(3, 3, 128, 16)))
    # Maps whose size is known only as the step runs (--progressive-resize) may be small.
    assert fg.is_candidate(**dict(CANDIDATE, x_shape=(512, None, None, 256)))


def test_faster_sides_are_the_measured_ones_of_the_map_or_of_every_small_square_one():
    timed = []

    def choose(x_shape, kernel_shape, dtype):
        timed.append(x_shape)
        return fg.MATMULS if x_shape[1] in (2, 4, 7) else fg.NATIVE

    kernel = (3, 3, 256, 256)
    assert fg.faster_sides((512, 7, 7, 256), kernel, tf.bfloat16, choose) == [7]
    assert fg.faster_sides((512, 5, 5, 256), kernel, tf.bfloat16, choose) == []
    assert fg.faster_sides((512, 4, 2, 256), kernel, tf.bfloat16, choose) == []  # not square: not timed
    assert timed == [(512, 7, 7, 256), (512, 5, 5, 256)]
    assert fg.faster_sides((512, None, None, 256), kernel, tf.bfloat16, choose) == [2, 4, 7]
    # From the largest map down (8x8 is the largest of 64 positions), so that a Measured plan can infer.
    assert timed[2:] == [(512, side, side, 256) for side in range(8, 0, -1)]


def test_a_map_known_as_the_step_runs_gets_the_gradient_measured_faster_for_its_size():
    # Matrix products on 3x3 maps, TensorFlow's kernel on 5x5 and 3x5 ones: the same values (float32).
    rng = np.random.RandomState(2)
    kernel0 = rng.standard_normal((3, 3, 4, 2)).astype(np.float32)
    with tf.Graph().as_default(), v1.Session() as sess:
        x = v1.placeholder(tf.float32, [2, None, None, 4])
        kernel = tf.constant(kernel0)
        ours, plain = fg.conv2d_matmul_gradient(x, kernel, sides=[3]), tf.nn.conv2d(x, kernel, 1, "SAME")
        grads = [tf.gradients(tf.reduce_sum(y * y), [x, kernel]) for y in (ours, plain)]
        assert {"If", "StatelessIf"} & {op.type for op in v1.get_default_graph().get_operations()}
        for shape in ((2, 3, 3, 4), (2, 5, 5, 4), (2, 3, 5, 4)):
            ((dx, dk), (plain_dx, plain_dk)) = sess.run(grads, {x: rng.standard_normal(shape)})
            np.testing.assert_allclose(dk, plain_dk, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(dx, plain_dx)


def test_choice_is_the_faster_timed_once_per_cpu_and_shape(tmp_path):
    calls = []

    def timer(x_shape, kernel_shape, dtype):
        calls.append((tuple(x_shape), kernel_shape[-1], dtype))
        return {fg.NATIVE: 5.0, fg.MATMULS: 2.0} if x_shape[1] == 8 else {fg.NATIVE: 1.0, fg.MATMULS: 3.0}

    path = str(tmp_path / "probe.json")
    choose = lambda shape, cpu="Xeon": fg.choose(  # noqa: E731
        shape, (3, 3, 256, 256), tf.bfloat16, cpu={"model": cpu}, timer=timer, cache_file=path
    )
    assert choose((512, 8, 8, 256)) == fg.MATMULS and choose((512, 4, 4, 256)) == fg.NATIVE
    assert choose((512, 8, 8, 256)) == fg.MATMULS and len(calls) == 2  # cached
    assert choose((256, 8, 8, 256)) == fg.MATMULS and len(calls) == 3  # another batch is another shape
    assert choose((512, 8, 8, 256), cpu="EPYC") == fg.MATMULS and len(calls) == 4  # another CPU
    cache = json.load(open(path))
    assert len(cache) == 4 and {fg.NATIVE: 5.0, fg.MATMULS: 2.0} in cache.values()
    key = [k for k in cache if k.startswith("Xeon|") and "[512, 4, 4, 256]" in k][0]
    assert key.split("|")[5:7] == [tf.__version__, "bfloat16"]  # after the CPU key's five parts
    cache[key] = {fg.NATIVE: 1.0}  # a damaged entry is timed again
    json.dump(cache, open(path, "w"))
    assert choose((512, 4, 4, 256)) == fg.NATIVE and len(calls) == 5
    # A budget too short for probes (measure False): what is cached, else TensorFlow's kernel, untimed.
    untimed = lambda shape: fg.choose(  # noqa: E731
        shape, (3, 3, 256, 256), tf.bfloat16, cpu={"model": "Xeon"}, timer=timer, cache_file=path, measure=False
    )
    assert untimed((512, 8, 8, 256)) == fg.MATMULS and untimed((128, 8, 8, 256)) == fg.NATIVE and len(calls) == 5


@pytest.mark.bf16_kernels
def test_timing_runs_both_gradients():
    timing = fg.time_filter_gradients((4, 4, 4, 128), (3, 3, 128, 8), tf.bfloat16, runs=2, warmup=1)
    assert set(timing) == {fg.NATIVE, fg.MATMULS} and all(ms > 0 for ms in timing.values())


def _filter_gradient_ops(params, training=True, plan="measured"):
    """Conv2DBackpropFilter ops of a training step of ``params``'s network built with ``plan`` (by default
    a ``Measured`` one; None: the one ``params`` recorded)."""
    with tf.Graph().as_default():
        with v1.variable_scope("resnet"):
            model = registry.build(params, training, filter_gradients=fg.Measured() if plan == "measured" else plan)
            logits = model.forward_pass(tf.random.uniform([2, 32, 32, 3], 0, 255, seed=1))
        kernels = [v for v in v1.trainable_variables() if v.op.name.endswith("kernel") and v.shape.ndims == 4]
        grads = tf.gradients(tf.reduce_sum(logits), kernels)
        assert all(g is not None for g in grads)
        return sum(op.type == "Conv2DBackpropFilter" for op in v1.get_default_graph().get_operations())


def _cached_timings(tmp_path, monkeypatch, faster, sides=(7, 3)):
    """A probe cache in ``tmp_path`` where ``faster`` wins on square maps of ``sides`` (by default the
    two candidate shapes of the airbench network at width 0.5 on 32-pixel images), at batch 2, 128
    channels in and out: ``(its path, its content)``."""
    monkeypatch.setenv("CIFAR10_CACHE_DIR", str(tmp_path))
    cpu = machine.cpu_info()
    timing = {fg.NATIVE: 2.0, fg.MATMULS: 1.0} if faster == fg.MATMULS else {fg.NATIVE: 1.0, fg.MATMULS: 2.0}
    cache = {fg.cache_key(cpu, (2, s, s, 128), (3, 3, 128, 128), tf.bfloat16): timing for s in sides}
    path = tmp_path / fg.CACHE_FILE
    path.write_text(json.dumps(cache))
    return path, cache


@pytest.mark.parametrize("faster", [fg.MATMULS, fg.NATIVE])
def test_airbench_trains_its_wide_small_convolutions_with_the_measured_gradient(tmp_path, monkeypatch, faster):
    # Widths 32, 128, 128: group 2's second convolution and group 3's first on 7x7 maps and group 3's
    # second on 3x3 ones have 128 channels in; group 1's and group 2's first are narrow or large.
    path, cache = _cached_timings(tmp_path, monkeypatch, faster)
    params = hp(network="airbench", width_multiplier=0.5, precision="bf16")
    assert _filter_gradient_ops(params) == (3 if faster == fg.MATMULS else 6)
    assert json.loads(path.read_text()) == cache  # nothing timed: every candidate was cached
    # Not candidates: float32, and inference graphs, whatever the cache says (and nothing timed).
    assert _filter_gradient_ops(hp(network="airbench", width_multiplier=0.5)) == 6
    assert _filter_gradient_ops(params, training=False) == 6
    assert json.loads(path.read_text()) == cache


def test_a_recorded_plan_builds_the_measured_graph_without_timing_or_reading_a_cache(tmp_path, monkeypatch):
    params = hp(network="airbench", width_multiplier=0.5, precision="bf16")
    timed = []
    plan = fg.Measured(choose_fn=lambda *shape: timed.append(shape) or fg.NATIVE)
    assert _filter_gradient_ops(params, plan=plan) == 6
    assert {shape[0] for shape in timed} == {(2, 7, 7, 128), (2, 3, 3, 128)}  # the three candidates' maps
    monkeypatch.setattr(fg, "choose", lambda *a, **k: pytest.fail("a recorded plan times nothing"))
    monkeypatch.setenv("CIFAR10_CACHE_DIR", str(tmp_path / "none"))
    assert _filter_gradient_ops(params.replace(filter_gradients={"3x3x128x128": [7]}), plan=None) == 4
    assert _filter_gradient_ops(params.replace(filter_gradients={"3x3x128x128": [3, 7]}), plan=None) == 3
    assert _filter_gradient_ops(params.replace(filter_gradients={"3x3x128x128": [5]}), plan=None) == 6
    assert _filter_gradient_ops(params.replace(filter_gradients={}), plan=None) == 6
    assert _filter_gradient_ops(params.replace(filter_gradients={"3x3x128x128": [3, 7]}), False, plan=None) == 6
    measured = fg.Measured(choose_fn=lambda x_shape, *_: fg.MATMULS if x_shape[1] <= 3 else fg.NATIVE)
    _filter_gradient_ops(params, plan=measured)
    assert measured.plan == {"3x3x128x128": [3]} and fg.Recorded(measured.plan).plan == measured.plan


def test_a_measured_plan_times_only_the_sides_that_earlier_ones_leave_open():
    """The matrix products' time grows faster with the map than TensorFlow's kernel: a side below one where
    they won wins, one above a side where they lost loses, untimed; other convolutions, batches and types
    are timed on their own."""
    timed = []

    def choose(x_shape, kernel_shape, dtype):
        timed.append((x_shape[0], x_shape[1], kernel_shape[-1], dtype))
        return fg.MATMULS if x_shape[1] <= 5 else fg.NATIVE

    plan = fg.Measured(choose_fn=choose)
    wide = (3, 3, 256, 256)
    assert plan.sides((512, None, None, 256), wide, tf.bfloat16) == [1, 2, 3, 4, 5]
    assert [side for _, side, _, _ in timed] == [8, 7, 6, 5]  # 4, 3, 2 and 1 follow from 5
    del timed[:]
    assert plan.sides((512, 7, 7, 256), wide, tf.bfloat16) == [] and plan.sides(
        (512, 2, 2, 256), wide, tf.bfloat16
    ) == [2]
    assert timed == []  # both settled by the sides above
    assert plan.sides((128, 4, 4, 256), wide, tf.bfloat16) == [4]
    assert plan.sides((512, 4, 4, 128), (3, 3, 128, 128), tf.bfloat16) == [4]
    assert timed == [(128, 4, 256, tf.bfloat16), (512, 4, 128, tf.bfloat16)]
    assert plan.plan == {"3x3x256x256": [1, 2, 3, 4, 5], "3x3x128x128": [4]}
    # Asked from the smallest up, a win settles nothing above it: each side is timed until the first loss,
    # which settles the rest.
    timed_up = []
    upward = fg.Measured(choose_fn=lambda x, k, d: timed_up.append(x[1]) or choose(x, k, d))
    assert [upward.sides((512, s, s, 256), wide, tf.bfloat16) for s in range(1, 9)] == [
        [1],
        [2],
        [3],
        [4],
        [5],
        [],
        [],
        [],
    ]
    assert timed_up == [1, 2, 3, 4, 5, 6]


def test_native_only_turns_the_matrix_products_off_and_back_on(tmp_path, monkeypatch):
    _cached_timings(tmp_path, monkeypatch, fg.MATMULS)
    params = hp(network="airbench", width_multiplier=0.5, precision="bf16")
    with filter_gradient_speed.native_only():
        assert _filter_gradient_ops(params) == 6
        with filter_gradient_speed.native_only(False):
            assert _filter_gradient_ops(params) == 3
        assert _filter_gradient_ops(params) == 6
    assert _filter_gradient_ops(params) == 3


def test_benchmark_reads_the_networks_convolutions():
    params = hp(network="airbench", group_depth=3, train_batch_size=4)
    kernel = lambda i, o: (3, 3, i, o)  # noqa: E731
    # The whitening's 2x2 VALID convolution is not among them; conv2 and conv3 of a group share a shape.
    assert filter_gradient_speed.convolution_shapes(params, 32) == [
        ((4, 31, 31, 24), kernel(24, 64)),
        ((4, 15, 15, 64), kernel(64, 64)),
        ((4, 15, 15, 64), kernel(64, 256)),
        ((4, 7, 7, 256), kernel(256, 256)),
        ((4, 3, 3, 256), kernel(256, 256)),
    ]
    assert filter_gradient_speed.convolution_shapes(params, 20)[-1] == ((4, 2, 2, 256), kernel(256, 256))
    # ResNet-8: the stride-2 convolutions (explicitly padded, VALID) are not among them.
    shapes = filter_gradient_speed.convolution_shapes(hp(num_layers=8, train_batch_size=4), 32)
    assert shapes == [
        ((4, 32, 32, 3), kernel(3, 16)),
        ((4, 32, 32, 16), kernel(16, 16)),
        ((4, 16, 16, 32), kernel(32, 32)),
        ((4, 8, 8, 64), kernel(64, 64)),
    ]


@pytest.mark.bf16_kernels
def test_benchmark_times_each_shape_and_whole_steps_both_ways(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CIFAR10_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "filter_gradient_speed.json"
    argv = ["--batch-size", "2", "--image-sizes", "20", "--precisions", "bf16", "--runs", "1", "--steps", "1"]
    assert filter_gradient_speed.main(argv + ["--warmup", "1", "--rounds", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    shapes = result["shapes"]
    assert [s["input"][1] for s in shapes] == [19, 9, 9, 4, 2]
    assert [s["candidate"] for s in shapes] == [False, False, False, True, True]
    assert all(s["ms"]["native"] > 0 and s["ms"]["matmuls"] > 0 for s in shapes)
    step = result["steps"]["bf16_20"]
    assert step["speedup"] == round(step["measured"] / step["native_only"], 3) and step["native_only"] > 0
    assert "bf16       20" in capsys.readouterr().out


def test_benchmark_sweeps_every_small_square_map_of_each_candidate_kernel(tmp_path, monkeypatch, capsys):
    timed = []

    def timer(x_shape, kernel_shape, dtype, runs, warmup):
        timed.append((x_shape, kernel_shape))
        return {fg.NATIVE: 10.0, fg.MATMULS: float(x_shape[1])}

    monkeypatch.setattr(fg, "time_filter_gradients", timer)
    out = tmp_path / "sweep.json"
    argv = ["--sweep", "--group-depth", "2", "--width-multiplier", "0.5", "--batch-size", "4", "--precisions", "bf16"]
    assert filter_gradient_speed.main(argv + ["--rounds", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["sweep"]
    # airbench94 x0.5's one kernel with 128 channels in, on maps of 1 to 8 pixels a side.
    assert [(r["kernel"], r["side"]) for r in rows] == [([3, 3, 128, 128], side) for side in range(1, 9)]
    assert [r["ratio"] for r in rows] == [side / 10 for side in range(1, 9)]
    assert timed[0] == ((4, 1, 1, 128), (3, 3, 128, 128)) and "3x3x128x128" in capsys.readouterr().out


@pytest.mark.parametrize("budget,from_cache", [(90.0, True), (300.0, False), (None, False)])
def test_filter_gradients_are_timed_except_under_a_budget_too_short_for_probes(monkeypatch, budget, from_cache):
    """The configuration times the plan (``training.machine``); only a budget under the probes' threshold
    plans it from the cache alone, first (``budget.probes``)."""
    from estimator.budget import probes
    from estimator.training import machine as machine_plan

    asked = []
    monkeypatch.setattr(fg, "choose", lambda *shape, **kw: asked.append(kw["measure"]) or fg.NATIVE)
    monkeypatch.setattr(probes, "network_speed", lambda *args, **kw: {"train": 100.0, "eval": 300.0})
    params = hp(network="airbench", width_multiplier=0.5, precision="bf16", time_budget=budget)
    cpu = {"model": "Xeon", "flags": {"amx_bf16"}}
    budgeted = probes.measure_this_machine(params, {}, cpu)
    assert budgeted.filter_gradients == ({"3x3x128x128": []} if from_cache else None)
    assert set(asked) == ({False} if from_cache else set())
    assert machine_plan.filter_gradient_plan(params, cpu) == {"3x3x128x128": []} and asked[-1] is True


@pytest.mark.bf16_kernels
def test_a_progressively_resized_network_times_every_small_square_map_once(tmp_path, monkeypatch):
    # Maps known only as the step runs: the three candidate convolutions (128 channels in) take the
    # measured gradient through a condition on the map's side; the sides are timed once (here cached).
    path, cache = _cached_timings(tmp_path, monkeypatch, fg.MATMULS, sides=range(1, 9))
    params = hp(network="airbench", width_multiplier=0.5, precision="bf16")
    with tf.Graph().as_default():
        with v1.variable_scope("resnet"):
            model = registry.build(params, True, filter_gradients=fg.Measured())
            side = v1.placeholder_with_default(20, [])
            images = tf.image.resize(tf.random.uniform([2, 32, 32, 3], 0, 255), tf.stack([side, side]))
            assert images.shape.as_list() == [2, None, None, 3]
            logits = model.forward_pass(images)
        kernels = [v for v in v1.trainable_variables() if v.op.name.endswith("kernel") and v.shape.ndims == 4]
        grads = tf.gradients(tf.reduce_sum(logits), kernels)
        ops = v1.get_default_graph().get_operations()
        conditions = [op for op in ops if op.type in ("If", "StatelessIf")]
        assert len(conditions) == 3 and sum(op.type == "Conv2DBackpropFilter" for op in ops) == 3
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            assert all(np.isfinite(g).all() for g in sess.run(grads))
    assert json.loads(path.read_text()) == cache
