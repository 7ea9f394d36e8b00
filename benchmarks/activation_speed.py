"""What the airbench network's activations cost: TensorFlow's GELU ops against the fused GELU and ReLU.

    python -m benchmarks.activation_speed --batch-size 512

Times one training step's activations, forward and backward, at the shapes of
the network's activations (read off the network built at ``--batch-size``, one
tower), for each activation and precision side by side in one run:
``tf.nn.gelu`` (a dozen element-wise ops, what the network trained with before
``airbench_model.fused_gelu``), ``fused_gelu`` (two XLA-compiled kernels: the
training graph's GELU) and ReLU (oneDNN fuses it into the batch norm before it
in the real network, so its figure here is an upper bound). Each is timed
against the same graph without the activation (the cast and the sums around
it), and the difference is the activation's cost. Prints the CPU model and its
bf16 flags and writes JSON.
"""

import argparse

from benchmarks.common import print_machine, write_result

ACTIVATIONS = ("none", "tf.nn.gelu", "fused_gelu", "relu")


def activation_shapes(batch_size: int, group_depth: int = 2, image_size: int = 32):
    """Shapes of the airbench network's activations in one training step, from the network itself."""
    import tensorflow as tf

    from estimator import airbench_model

    with tf.Graph().as_default():
        model = airbench_model.AirbenchCifar10(True, 0.6, 1e-5, group_depth=group_depth)
        model.forward_pass(tf.zeros([batch_size, image_size, image_size, 3]))
        return [tuple(t.shape.as_list()) for t in model.relu_outputs]


def activation_fn(name: str):
    import tensorflow as tf

    from estimator import airbench_model

    return {"none": tf.identity, "tf.nn.gelu": tf.nn.gelu, "fused_gelu": airbench_model.fused_gelu, "relu": tf.nn.relu}[
        name
    ]


def time_activation(name: str, precision: str, shapes, steps: int, warmup: int) -> float:
    """Milliseconds of forward and backward passes of ``name`` over ``shapes`` (summed), in ``precision``."""
    import numpy as np
    import tensorflow as tf

    from estimator import precision as precision_lib

    v1 = tf.compat.v1
    dtype = tf.bfloat16 if precision == "bf16" else tf.float32
    total = 0.0
    for shape in shapes:
        with tf.Graph().as_default():
            x = tf.Variable(np.random.RandomState(0).normal(size=shape).astype(np.float32))
            inputs = tf.cast(x, dtype)
            y = activation_fn(name)(inputs)
            grad = tf.gradients(tf.reduce_sum(tf.cast(y, tf.float32)), inputs)[0]
            # Fetch a value that needs both passes (an op fetched only for its effects may be pruned).
            fetch = tf.reduce_sum(tf.cast(grad, tf.float32)) + tf.reduce_sum(tf.cast(y, tf.float32))
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                total += 1000 * precision_lib.seconds_per_run(sess, fetch, steps, warmup)
    return total


def main(argv=None):
    from estimator import airbench_model
    from estimator.precision import CANDIDATES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--group-depth", type=int, choices=airbench_model.GROUP_DEPTHS, default=2)
    parser.add_argument("--precisions", nargs="+", choices=CANDIDATES, default=list(CANDIDATES))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="Each figure is the best of this many rounds.")
    parser.add_argument("--out", default="benchmarks/results/activation_speed.json")
    args = parser.parse_args(argv)
    print_machine()
    shapes = activation_shapes(args.batch_size, args.group_depth)
    print(
        "activations of one step (batch %d): %s" % (args.batch_size, ", ".join("x".join(map(str, s)) for s in shapes))
    )
    ms = {p: {a: [] for a in ACTIVATIONS} for p in args.precisions}
    for _ in range(args.rounds):  # rounds interleaved, so drift on a shared machine hits every figure alike
        for precision in args.precisions:
            for name in ACTIVATIONS:
                ms[precision][name].append(round(time_activation(name, precision, shapes, args.steps, args.warmup), 2))
    result = {"batch_size": args.batch_size, "group_depth": args.group_depth, "shapes": shapes, "precisions": {}}
    print(
        "\nms per training step, forward + backward, best of %d rounds (the cast and sums around them taken off)"
        % args.rounds
    )
    print("%-6s %-12s %10s %10s" % ("", "activation", "ms", "speedup"))
    for precision in args.precisions:
        base = min(ms[precision]["none"])
        costs = {name: round(min(ms[precision][name]) - base, 2) for name in ACTIVATIONS if name != "none"}
        for name, cost in costs.items():
            print("%-6s %-12s %10.1f %10.2f" % (precision, name, cost, costs["tf.nn.gelu"] / max(cost, 1e-9)))
        result["precisions"][precision] = {"ms": costs, "rounds_ms": ms[precision]}
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
