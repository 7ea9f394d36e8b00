"""Where a training step's time goes, by op type, fp32 beside bf16, in one run.

    python -m benchmarks.step_profile --num-layers 20 --batch-size 256
    python -m benchmarks.step_profile --network airbench --batch-size 512 --data-dir work/cifar-10-full
    python -m benchmarks.step_profile --network airbench --batch-size 512 --data-dir D --image-sizes 32 28 24 20

Builds the trainer's own training graph (``model_fn`` in TRAIN mode, one tower,
random images), runs warm-up steps, then traces a few steps with TensorFlow's
step stats (``RunOptions.FULL_TRACE``) and sums each op type's time: the
convolutions and their gradients, batch norm, the casts bf16 adds, the layout
reorders oneDNN inserts, GELU (the ops under its name, forward and gradient),
max pooling, and the rest. Op times overlap on two threads, so the shares are
of the summed op time, and the step's wall time is printed beside.
``--image-sizes``: the same for training images of other sides, as ``--progressive-resize``
trains on them (resized in the graph), with each size's images/s relative to 32 pixels.
Prints the CPU model and its bf16 flags (figures only compare within one run)
and writes JSON.
"""

import argparse
import collections

from benchmarks.common import print_machine, write_result

# Op types grouped as the issue asks: casts, batch norm, layout reorders, convolutions. Matched
# by substring (oneDNN's ops carry prefixes such as _MklNative), so "Conv2D" also covers its
# gradients, "Relu" ReluGrad, "Add" AddV2 and AddN.
GROUPS = (
    # MatMul: the filter gradients filter_gradient computes as matrix products (and the classifier's,
    # a few microseconds).
    ("convolution", ("Conv2D", "DepthwiseConv2dNative", "MatMul")),
    ("batch norm", ("FusedBatchNorm",)),
    ("cast", ("Cast",)),
    ("layout reorder", ("Transpose", "ToTf", "Reorder")),
    ("elementwise", ("Relu", "Add", "Mul", "Sub", "Pad", "Identity")),
    ("optimizer", ("Momentum",)),
    ("max pool", ("MaxPool",)),
)


def group_of(op_type: str, node_name: str = "") -> str:
    # GELU is several elementwise ops (Mul, Erf, AddV2 and their gradients): told apart by its name
    # scope ("Gelu/", "gradients/.../Gelu/..._grad"), not by type.
    if "Gelu" in node_name or op_type == "Erf":
        return "GELU"
    for group, names in GROUPS:
        if any(name in op_type for name in names):
            return group
    return "other"


def op_type_of(node) -> str:
    # timeline_label reads "name = OpType(inputs)"; node_name alone lacks the type.
    label = node.timeline_label
    if " = " in label:
        return label.split(" = ", 1)[1].split("(", 1)[0]
    return node.node_name.split(":")[0].rsplit("/", 1)[-1]


def traced_op_times(sess, train_op, steps: int):
    """``steps`` runs of ``train_op`` with TensorFlow's step stats: microseconds summed by op type, by group
    (``group_of``) and by node (type and name), as three Counters."""
    import tensorflow as tf

    v1 = tf.compat.v1
    by_type, by_group, by_node = collections.Counter(), collections.Counter(), collections.Counter()
    options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
    for _ in range(steps):
        metadata = v1.RunMetadata()
        sess.run(train_op, options=options, run_metadata=metadata)
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                op_type, micros = op_type_of(node), node.all_end_rel_micros
                by_type[op_type] += micros
                by_group[group_of(op_type, node.node_name)] += micros
                by_node["%s %s" % (op_type, node.node_name)] += micros
    return by_type, by_group, by_node


def profile(
    num_layers: int, batch_size: int, precision: str, width: float, steps: int, warmup: int, image_size=32, **network
) -> dict:
    """``network``: further HParams fields (``network="airbench"``, ``group_depth=3``, ...); ``image_size``:
    the side training images are resized to (``--progressive-resize``; 32: not resized)."""
    import numpy as np
    import tensorflow as tf

    from estimator.common import machine
    from estimator.data import records as fmt
    from estimator.networks import registry
    from estimator.training.hparams import HParams
    from estimator.training.model_fn import model_fn

    v1 = tf.compat.v1
    fields = dict(
        data_dir="unused",
        job_dir="unused",
        num_gpus=0,
        num_layers=num_layers,
        width_multiplier=width,
        train_batch_size=batch_size,
        precision=precision,
        data_format="channels_last",
        learning_rate=0.01,
        seed=0,
        num_train_examples=50000,
        health_checks="off",
    )
    if image_size != fmt.HEIGHT:
        # --progressive-resize at this side until the end of 80,000 steps: a few steps are all at it.
        fields.update(progressive_resize=image_size, progressive_resize_until=1.0)
    hp = HParams(**dict(fields, **network))
    with tf.Graph().as_default():
        v1.set_random_seed(0)
        rng = np.random.RandomState(0)
        images = tf.constant(rng.uniform(0, 255, (batch_size, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH)).astype(np.float32))
        labels = tf.constant(rng.randint(0, fmt.NUM_CLASSES, batch_size).astype(np.int32))
        spec = model_fn(images, labels, tf.estimator.ModeKeys.TRAIN, hp)
        config = v1.ConfigProto(intra_op_parallelism_threads=0, inter_op_parallelism_threads=0)
        with v1.Session(config=config) as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            wall = machine.seconds_per_run(sess, spec.train_op, steps, warmup)
            by_type, by_group, by_node = traced_op_times(sess, spec.train_op, steps)
    total = sum(by_type.values())
    return {
        "network": registry.describe(hp),
        "image_size": image_size,
        "images_per_sec": round(batch_size / wall, 1),
        "step_ms": round(1000 * wall, 2),
        "op_ms_per_step": round(total / steps / 1000, 2),
        "groups_ms": {g: round(v / steps / 1000, 2) for g, v in by_group.most_common()},
        "top_ops_ms": {t: round(v / steps / 1000, 2) for t, v in by_type.most_common(15)},
        # Which layer an op time belongs to ("_MklNativeConv2DBackpropFilter .../group3/Conv2D_grad/...").
        "top_nodes_ms": {n: round(v / steps / 1000, 2) for n, v in by_node.most_common(20)},
    }


def run_name(precision: str, size: int) -> str:
    """A run's key in the JSON: the precision, with the side where it is not 32 ("bf16 24px")."""
    return precision if size == 32 else "%s %dpx" % (precision, size)


def size_speedups(result: dict, precisions, sizes) -> dict:
    """``{precision: {side: images/s over 32 pixels' images/s}}`` where 32 and another side were run."""
    if 32 not in sizes or len(sizes) < 2:
        return {}
    return {
        p: {
            s: round(result[run_name(p, s)]["images_per_sec"] / result[run_name(p, 32)]["images_per_sec"], 3)
            for s in sizes
        }
        for p in precisions
    }


def parse_args(argv=None):
    """The arguments and the network's further HParams fields (``profile``'s ``network``); a bad one is
    argparse's one line."""
    from estimator.data import records as fmt
    from estimator.networks import airbench, registry
    from estimator.training import schedules

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--network", choices=registry.NETWORKS, default="resnet")
    parser.add_argument("--num-layers", type=int, default=20, help="ResNets only.")
    parser.add_argument("--group-depth", type=int, choices=airbench.GROUP_DEPTHS, default=2, help="airbench only.")
    parser.add_argument(
        "--data-dir", help="airbench only: TFRecords whose first training images its whitening layer is computed from."
    )
    parser.add_argument("--width-multiplier", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=5, help="Timed steps, then as many traced ones.")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--image-sizes",
        nargs="+",
        type=int,
        default=[32],
        help="Sides of the training images (32, or as --progressive-resize trains on them: 16-31).",
    )
    parser.add_argument("--out", default="benchmarks/results/step_profile.json")
    args = parser.parse_args(argv)
    network = {}
    if args.network == "airbench":
        if not args.data_dir:
            parser.error("--network airbench needs --data-dir (its whitening layer is computed from training images)")
        network = dict(network="airbench", group_depth=args.group_depth, data_dir=args.data_dir)
    bad = [s for s in args.image_sizes if s != fmt.HEIGHT and not schedules.MIN_RESIZE <= s < fmt.HEIGHT]
    if bad:
        parser.error(
            "--image-sizes %s: each must be %d or from %d to %d"
            % (bad, fmt.HEIGHT, schedules.MIN_RESIZE, fmt.HEIGHT - 1)
        )
    return args, network


def print_groups(result: dict, batch_size: int) -> None:
    """One column per run: each op group's ms per step (the first run's largest first), then all ops, the
    step's wall time and images/s."""
    names = list(result)
    print(
        "\n%s, batch %d: ms per step by op group (summed op time; ops overlap on threads)"
        % (result[names[0]]["network"], batch_size)
    )
    groups = sorted(
        {g for r in result.values() for g in r["groups_ms"]}, key=lambda g: -result[names[0]]["groups_ms"].get(g, 0)
    )
    print("%-16s" % "group" + "".join("%12s" % n for n in names))
    for g in groups:
        print("%-16s" % g + "".join("%12.1f" % result[n]["groups_ms"].get(g, 0.0) for n in names))
    print("%-16s" % "all ops" + "".join("%12.1f" % result[n]["op_ms_per_step"] for n in names))
    print("%-16s" % "step wall" + "".join("%12.1f" % result[n]["step_ms"] for n in names))
    print("%-16s" % "images/s" + "".join("%12.1f" % result[n]["images_per_sec"] for n in names))


def print_top_ops(result: dict) -> None:
    for n in result:
        print(
            "\n%s, top op types (ms per step): %s"
            % (n, ", ".join("%s %.1f" % kv for kv in result[n]["top_ops_ms"].items()))
        )
        print("%s, slowest ops (ms per step):" % n)
        for node, ms in result[n]["top_nodes_ms"].items():
            print("  %8.1f  %s" % (ms, node))


def print_size_speedups(speedups: dict, sizes) -> None:
    from estimator.data import records as fmt

    print("\nimages/s by image side, as a multiple of 32 pixels' (the pixels' share predicts (32/side)^2)")
    print("%-8s" % "side" + "".join("%12s" % p for p in speedups) + "%12s" % "(32/side)^2")
    for size in sizes:
        print(
            "%-8d" % size
            + "".join("%12.2f" % speedups[p][size] for p in speedups)
            + "%12.2f" % ((fmt.HEIGHT / size) ** 2)
        )


def main(argv=None):
    args, network = parse_args(argv)
    import tensorflow as tf

    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    print_machine()
    result = {}
    for precision in args.precisions:
        for size in args.image_sizes:
            result[run_name(precision, size)] = profile(
                args.num_layers,
                args.batch_size,
                precision,
                args.width_multiplier,
                args.steps,
                args.warmup,
                image_size=size,
                **network,
            )
    print_groups(result, args.batch_size)
    print_top_ops(result)
    speedups = size_speedups(result, args.precisions, args.image_sizes)
    if speedups:
        print_size_speedups(speedups, args.image_sizes)
    write_result(args.out, dict(result, settings=vars(args), image_size_speedups=speedups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
