"""bf16 convolutions' filter gradients as matrix products where that is faster, by measurement.

TensorFlow 2.15's oneDNN Conv2DBackpropFilter is slow in bf16 for wide convolutions on small
maps: on a Xeon with AMX, 256 to 256 channels on 7x7 maps at batch 512 took 52.8 ms, on 3x3 maps
27.3 ms (0.2 TFLOP/s). The same gradient is a sum over the kernel's offsets: for each offset, the
input shifted by it, as a ``[batch*height*width, in]`` matrix, times the output's gradient as a
``[batch*height*width, out]`` one; as nine matrix products on the matrix units those shapes took
38.6 and 8.6 ms, and airbench's deeper network trained 1.27x faster on 32-pixel images and 1.41x on
20-pixel ones (``benchmarks.filter_gradient_speed``, docs/speed.md). Narrow or large maps go the
other way (64 channels on 15x15 maps: 8.3 against 26.9 ms), as does float32 on the same CPU (7x7
maps: 90.5 against 124.3 ms), and other CPUs were not measured: so a convolution only becomes a
candidate where the matrix products can pay (bf16, stride 1, ``SAME``, channels last, at least
``MIN_IN_CHANNELS`` in, at most ``MAX_POSITIONS`` positions, or a map whose size is known only as
the step runs), and each candidate's shape is timed both ways on its first use (about a second; fewer
maps than occur, ``Measured``) and cached per CPU model like the precision probe (``machine.cache_path``).
Only training builds it: evaluation and exports have no gradients. The matrix products accumulate in
float32 and round once, so in bf16 they are also closer to the exact sum than TensorFlow's kernel
(docs/speed.md).
"""

from __future__ import annotations

import logging

import tensorflow as tf

from estimator.common import machine

CACHE_FILE = "filter_gradient_probe.json"
MIN_IN_CHANNELS = 128
MAX_POSITIONS = 64
PROBE_WARMUP = 1
# Each way's best of two runs after a warmup: a third run costs a first run 0.3 s and changes no answer that
# the VM's noise does not also change (docs/speed.md).
PROBE_RUNS = 2
NATIVE, MATMULS = "native", "matmuls"


def filter_gradient_matmuls(x, dy, kernel_size: int):
    """The gradient of a stride-1 ``SAME`` NHWC convolution's ``[k, k, in, out]`` kernel, given its
    input ``x`` and the gradient ``dy`` of its output, as one matrix product per kernel offset (the
    map's height and width may be known only when it runs)."""
    in_channels, out_channels = int(x.shape[-1]), int(dy.shape[-1])
    height, width = (x.shape[i] if x.shape[i] is not None else tf.shape(x)[i] for i in (1, 2))
    pad = kernel_size // 2
    padded = tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    dy2 = tf.reshape(dy, [-1, out_channels])
    products = [
        tf.matmul(tf.reshape(padded[:, a : a + height, b : b + width, :], [-1, in_channels]), dy2, transpose_a=True)
        for a in range(kernel_size)
        for b in range(kernel_size)
    ]
    return tf.reshape(tf.stack(products), [kernel_size, kernel_size, in_channels, out_channels])


def conv2d_matmul_gradient(x, kernel, sides=None):
    """``tf.nn.conv2d(x, kernel, 1, "SAME")`` (NHWC), with the kernel's gradient from
    ``filter_gradient_matmuls`` (on square maps of one of ``sides`` pixels a side, when given: the
    others get TensorFlow's, chosen as the step runs) and the input's from TensorFlow's own kernel."""

    def native(x, kernel, dy):
        return tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=tf.shape(kernel), out_backprop=dy, strides=[1, 1, 1, 1], padding="SAME"
        )

    @tf.custom_gradient
    def conv(x, kernel):
        def gradient(dy):
            dx = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.shape(x), filter=kernel, out_backprop=dy, strides=[1, 1, 1, 1], padding="SAME"
            )
            matmuls = lambda: filter_gradient_matmuls(x, dy, int(kernel.shape[0]))  # noqa: E731
            if sides is None:
                return dx, matmuls()
            height, width = tf.shape(x)[1], tf.shape(x)[2]
            square = tf.logical_and(tf.equal(height, width), tf.reduce_any(tf.equal(height, list(sides))))
            return dx, tf.cond(square, matmuls, lambda: native(x, kernel, dy))

        return tf.nn.conv2d(x, kernel, 1, "SAME"), gradient

    return conv(x, kernel)


def is_candidate(x_shape, kernel_shape, dtype, strides: int, padding: str, data_format: str) -> bool:
    """Whether a convolution's filter gradient may be faster as matrix products (then it is timed).
    A map whose height and width are known only as the step runs (``--progressive-resize``) is one."""
    batch, height, width, in_channels = x_shape
    size, size2 = kernel_shape[:2]
    small = height is None and width is None or None not in (height, width) and height * width <= MAX_POSITIONS
    return (
        dtype == tf.bfloat16
        and strides == 1
        and padding == "SAME"
        and data_format == "NHWC"
        and size == size2
        and size % 2 == 1
        and None not in (batch, in_channels)
        and in_channels >= MIN_IN_CHANNELS
        and small
    )


def time_filter_gradients(x_shape, kernel_shape, dtype, runs: int = PROBE_RUNS, warmup: int = PROBE_WARMUP) -> dict:
    """``{NATIVE: ms, MATMULS: ms}``: one filter gradient of this shape each way, alternated, best of
    ``runs``, on random values in a graph and session of their own."""
    v1 = tf.compat.v1
    dtype = tf.as_dtype(dtype)
    size = int(kernel_shape[0])
    out_shape = list(x_shape[:3]) + [int(kernel_shape[-1])]
    with tf.Graph().as_default():
        # Variables, not constants, which the graph optimiser would fold away; drawn by the graph, since a bf16
        # numpy array in a graph is one integer field per value and takes seconds to build.
        x, dy = (
            tf.Variable(tf.cast(tf.random.stateless_uniform(shape, seed=[0, i], minval=-1.0), dtype))
            for i, shape in enumerate((list(x_shape), out_shape))
        )
        native = tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=list(kernel_shape), out_backprop=dy, strides=[1, 1, 1, 1], padding="SAME"
        )
        fetches = {NATIVE: native, MATMULS: filter_gradient_matmuls(x, dy, size)}
        best = {name: float("inf") for name in fetches}
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for round_ in range(warmup + runs):
                for name, fetch in fetches.items():
                    seconds = machine.seconds_per_run(sess, fetch.op, 1, 0)
                    if round_ >= warmup:
                        best[name] = min(best[name], seconds)
    return {name: round(seconds * 1e3, 3) for name, seconds in best.items()}


def cache_key(cpu: dict, x_shape, kernel_shape, dtype) -> str:
    parts = (machine.cpu_key(cpu), tf.__version__, tf.as_dtype(dtype).name, list(x_shape), list(kernel_shape))
    return "|".join(str(v) for v in parts)


def choose(x_shape, kernel_shape, dtype, cpu=None, timer=time_filter_gradients, cache_file=None, measure=True) -> str:
    """``MATMULS`` or ``NATIVE``: the faster filter gradient for this convolution on this CPU, timed on
    first use and cached per CPU (``machine.cpu_key``), TensorFlow version, type and shape. ``measure``
    False: from the cache, else ``NATIVE`` (TensorFlow's own kernel, untimed)."""
    cpu = cpu or machine.cpu_info()
    path = cache_file or machine.cache_path(CACHE_FILE)
    key = cache_key(cpu, x_shape, kernel_shape, dtype)
    timer_fn = (lambda: timer(x_shape, kernel_shape, dtype)) if measure else None
    timing, measured = machine.cached_probe(path, key, (NATIVE, MATMULS), timer_fn)
    if timing is None:
        return NATIVE
    if measured:
        logging.getLogger("tensorflow").info(
            "Filter gradient of a %s convolution on %s: %.1f ms native, %.1f ms as matrix products.",
            list(kernel_shape),
            list(x_shape),
            timing[NATIVE],
            timing[MATMULS],
        )
    return MATMULS if timing[MATMULS] < timing[NATIVE] else NATIVE


def faster_sides(x_shape, kernel_shape, dtype, choose_fn=None) -> list:
    """The sides of the square maps on which this candidate convolution's filter gradient was measured
    faster as matrix products: its own map's (if that is known and square), or, for a map known only as
    the step runs, every square one of at most ``MAX_POSITIONS`` positions (asked from the largest down,
    so that ``Measured`` can infer the small ones)."""
    choose_fn = choose_fn or choose
    batch, height, width, in_channels = x_shape
    if height is not None or width is not None:
        sides = [height] if height == width else []
    else:
        sides = [side for side in range(MAX_POSITIONS, 0, -1) if side * side <= MAX_POSITIONS]
    faster = [side for side in sides if choose_fn((batch, side, side, in_channels), kernel_shape, dtype) == MATMULS]
    return sorted(faster)


def kernel_key(kernel_shape) -> str:
    """A plan's key for a convolution: its kernel's shape, ``"3x3x256x256"`` (the batch is the job's)."""
    return "x".join(str(int(n)) for n in kernel_shape)


class Recorded:
    """A plan resolved before the graph is built (``HParams.filter_gradients``, hparams.json): for each
    candidate convolution's kernel shape, the map sides on which its filter gradient is computed as
    matrix products. Building a graph from it times nothing and reads nothing but the plan, so a job
    restarted on another machine builds the graph its checkpoints were trained with."""

    def __init__(self, plan=None):
        self.plan = {key: sorted(set(sides)) for key, sides in (plan or {}).items()}

    def sides(self, x_shape, kernel_shape, dtype) -> list:
        return list(self.plan.get(kernel_key(kernel_shape), ()))


class Measured(Recorded):
    """A plan measured as a graph is built (by the configuration, once, and by the speed probes): each
    candidate's shape timed both ways on first use, cached in ``cache_dir`` (``--probe-cache``), and
    what was chosen kept in ``plan`` (``Recorded``'s form).

    A map is not timed where the sides already decided for the same convolution and batch settle it:
    the matrix products' time grows faster with the map than TensorFlow's kernel (on a Zen 5 at batch
    512 their ratio rose with the side, give or take noise, from 0.17 at 1x1 to 0.97 at 8x8 for 256
    channels and 0.24 to 1.24 for 128, and no side won between two that lost:
    ``benchmarks.filter_gradient_speed --sweep``, docs/speed.md), so a side below one where they won
    wins too, and a side above one where they lost loses. Asked from the largest map down, a first run
    times two or three sides of a convolution instead of each one. ``measure`` False (a budget too short
    for probes): what the cache holds, else TensorFlow's kernel."""

    def __init__(self, cache_dir: str = None, cpu=None, choose_fn=None, measure=True):
        super().__init__()
        cache_file = machine.cache_path(CACHE_FILE, cache_dir)
        self._choose = choose_fn or (lambda *shape: choose(*shape, cpu=cpu, cache_file=cache_file, measure=measure))
        self._decided = {}  # (kernel, batch, channels in, dtype) -> {side: MATMULS or NATIVE}

    def _faster(self, x_shape, kernel_shape, dtype) -> str:
        """``choose``'s answer for one square map, inferred from the sides decided before where they settle it."""
        batch, side, _, in_channels = x_shape
        decided = self._decided.setdefault((kernel_key(kernel_shape), batch, in_channels, str(dtype)), {})
        if any(known >= side and faster == MATMULS for known, faster in decided.items()):
            return MATMULS
        if any(known <= side and faster == NATIVE for known, faster in decided.items()):
            return NATIVE
        decided[side] = self._choose(x_shape, kernel_shape, dtype)
        return decided[side]

    def sides(self, x_shape, kernel_shape, dtype) -> list:
        sides = faster_sides(x_shape, kernel_shape, dtype, self._faster)
        key = kernel_key(kernel_shape)
        self.plan[key] = sorted(set(self.plan.get(key, ())) | set(sides))
        return sides


def conv2d(x, kernel, strides: int, padding: str, data_format: str, training: bool, plan: Recorded = None):
    """``tf.nn.conv2d``, whose kernel gradient is computed as matrix products on the maps ``plan``
    (``Recorded`` or ``Measured``) names for this kernel's shape (training graphs only; no plan: never)."""
    x_shape, kernel_shape = tuple(x.shape.as_list()), tuple(kernel.shape.as_list())
    if training and plan is not None and is_candidate(x_shape, kernel_shape, x.dtype, strides, padding, data_format):
        sides = plan.sides(x_shape, kernel_shape, x.dtype)
        height, width = x_shape[1:3]
        if height is None and width is None and sides:  # the map's size is known only as the step runs
            return conv2d_matmul_gradient(x, kernel, sides)
        if height is not None and height == width and height in sides:
            return conv2d_matmul_gradient(x, kernel)
    return tf.nn.conv2d(x, kernel, strides, padding, data_format=data_format)
