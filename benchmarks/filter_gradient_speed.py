"""Convolution filter gradients: TensorFlow's kernel against matrix products, per shape and per step.

    python -m benchmarks.filter_gradient_speed --network airbench --group-depth 3 --batch-size 512
    python -m benchmarks.filter_gradient_speed --network resnet --num-layers 20 --batch-size 256
    ONEDNN_MAX_CPU_ISA=AVX2 python -m benchmarks.filter_gradient_speed --group-depth 2 --width-multiplier 0.5 \
        --precisions fp32
    python -m benchmarks.filter_gradient_speed --sweep --precisions bf16   # every square map of each kernel

For each stride-1 3x3 convolution of the training network (its input and kernel
shapes read off the network built at ``--batch-size``, for each of
``--image-sizes``), times the kernel's gradient as TensorFlow computes it
(``Conv2DBackpropFilter``) and as ``filter_gradient``'s nine matrix products, in
each of ``--precisions``, alternated, best of ``--rounds``; marks the shapes the
trainer considers (``filter_gradient.is_candidate``). Then times whole training
steps of the network with the matrix products where they were measured faster
and without them (``native_only``), rounds interleaved. Prints the
CPU model and its bf16 flags (figures only compare within one run) and writes JSON.

``--sweep``: instead, each candidate kernel of the network timed both ways on every square map of at most
``filter_gradient.MAX_POSITIONS`` positions, with the ratio of the two: what ``filter_gradient.Measured``
infers untimed sides from (the ratio rising with the map).
"""

import argparse
import contextlib
from unittest import mock

from benchmarks.common import print_machine, write_result


@contextlib.contextmanager
def native_only(enabled: bool = True):
    """Within it (``enabled``), networks built take TensorFlow's filter gradients everywhere, as if no map
    had been measured faster as matrix products: what the measured choice is timed against."""
    from estimator.ops import filter_gradient

    measured = getattr(filter_gradient.faster_sides, "measured", filter_gradient.faster_sides)

    def no_sides(*args, **kwargs):
        return []

    no_sides.measured = measured  # what a nested native_only(False) puts back
    with mock.patch.object(filter_gradient, "faster_sides", no_sides if enabled else measured):
        yield


def convolution_shapes(hp, image_size: int):
    """``[(input shape, kernel shape)]`` of the network's stride-1 SAME convolutions in a training step."""
    import tensorflow as tf

    from estimator.networks import registry

    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope("resnet"):
            model = registry.build(hp, True, "fp32")
            model.forward_pass(tf.zeros([hp.train_batch_size, image_size, image_size, 3]))
        shapes = []
        for op in tf.compat.v1.get_default_graph().get_operations():
            if op.type == "Conv2D" and op.get_attr("padding") == b"SAME" and list(op.get_attr("strides")) == [1] * 4:
                shape = (tuple(op.inputs[0].shape.as_list()), tuple(op.inputs[1].shape.as_list()))
                if shape not in shapes:
                    shapes.append(shape)
        return shapes


def best_of_rounds(x_shape, kernel_shape, dtype, args) -> dict:
    """ms of one filter gradient each way (``{NATIVE: ms, MATMULS: ms}``), the best of ``--rounds`` rounds of
    ``--runs``."""
    from estimator.ops import filter_gradient

    timings = [
        filter_gradient.time_filter_gradients(x_shape, kernel_shape, dtype, args.runs, 1) for _ in range(args.rounds)
    ]
    return {way: min(t[way] for t in timings) for way in (filter_gradient.NATIVE, filter_gradient.MATMULS)}


def sweep(hp, args, dtypes) -> dict:
    """Each candidate kernel of ``hp``'s network (at ``--image-sizes``' first) timed on every square map of at
    most ``MAX_POSITIONS`` positions, both ways, best of ``--rounds``: ``{"sweep": [...]}``."""
    from estimator.ops import filter_gradient

    kernels = []
    for x_shape, kernel_shape in convolution_shapes(hp, args.image_sizes[0]):
        if x_shape[3] >= filter_gradient.MIN_IN_CHANNELS and (x_shape[3], kernel_shape) not in kernels:
            kernels.append((x_shape[3], kernel_shape))
    sides = [
        side for side in range(1, filter_gradient.MAX_POSITIONS + 1) if side * side <= filter_gradient.MAX_POSITIONS
    ]
    rows = []
    print("\nms per filter gradient, best of %d rounds of %d; matmuls / native" % (args.rounds, args.runs))
    for name in args.precisions:
        for channels, kernel_shape in kernels:
            for side in sides:
                x_shape = (args.batch_size, side, side, channels)
                best = best_of_rounds(x_shape, kernel_shape, dtypes[name], args)
                ratio = best[filter_gradient.MATMULS] / best[filter_gradient.NATIVE]
                print(
                    "%-6s %-16s %4d %9.2f %9.2f %6.2f"
                    % (name, "x".join(map(str, kernel_shape)), side, *best.values(), ratio)
                )
                rows.append(
                    {
                        "precision": name,
                        "kernel": list(kernel_shape),
                        "side": side,
                        "ms": best,
                        "ratio": round(ratio, 3),
                    }
                )
    return {
        "network": args.network,
        "width_multiplier": args.width_multiplier,
        "batch_size": args.batch_size,
        "sweep": rows,
    }


def parse_args(argv=None) -> argparse.Namespace:
    from estimator.budget import probes as speed_probes
    from estimator.networks import airbench

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--network", choices=("airbench", "resnet"), default="airbench")
    parser.add_argument("--group-depth", type=int, choices=airbench.GROUP_DEPTHS, default=3)
    parser.add_argument("--num-layers", type=int, default=20)
    parser.add_argument("--width-multiplier", type=float, default=1.0, help="--network auto's narrower members.")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--image-sizes", type=int, nargs="+", default=[32, 20])
    parser.add_argument("--precisions", nargs="+", choices=speed_probes.CANDIDATES, default=["bf16", "fp32"])
    parser.add_argument("--runs", type=int, default=3, help="Timed filter gradients per shape and round.")
    parser.add_argument("--steps", type=int, default=10, help="Timed training steps per round.")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="Each figure is the best of this many rounds.")
    parser.add_argument("--sweep", action="store_true", help="Every square map of each candidate kernel instead.")
    parser.add_argument("--out", default="benchmarks/results/filter_gradient_speed.json")
    return parser.parse_args(argv)


def shapes_table(hp, args, dtypes) -> list:
    """Each stride-1 convolution's filter gradient timed both ways at each image size and precision, printed
    with whether the trainer considers it: the JSON's ``shapes``."""
    from estimator.ops import filter_gradient

    shapes = []
    print("\nms per filter gradient, best of %d rounds of %d" % (args.rounds, args.runs))
    print("%-6s %-20s %-16s %9s %9s %8s %s" % ("", "input", "kernel", "native", "matmuls", "speedup", "candidate"))
    for size in args.image_sizes:
        for x_shape, kernel_shape in convolution_shapes(hp, size):
            for name in args.precisions:
                best = best_of_rounds(x_shape, kernel_shape, dtypes[name], args)
                candidate = filter_gradient.is_candidate(x_shape, kernel_shape, dtypes[name], 1, "SAME", "NHWC")
                speedup = best[filter_gradient.NATIVE] / best[filter_gradient.MATMULS]
                print(
                    "%-6s %-20s %-16s %9.2f %9.2f %8.2f %s"
                    % (
                        name,
                        "x".join(map(str, x_shape)),
                        "x".join(map(str, kernel_shape)),
                        best[filter_gradient.NATIVE],
                        best[filter_gradient.MATMULS],
                        speedup,
                        "yes" if candidate else "no",
                    )
                )
                shapes.append(
                    {
                        "image_size": size,
                        "input": list(x_shape),
                        "kernel": list(kernel_shape),
                        "precision": name,
                        "ms": best,
                        "speedup": round(speedup, 3),
                        "candidate": candidate,
                    }
                )
    return shapes


def steps_table(hp, args) -> dict:
    """Whole training steps with the matrix products where measured faster and without them, rounds
    interleaved, printed: the JSON's ``steps``."""
    from estimator.budget import probes as speed_probes

    steps = {}
    rates = {}
    for _ in range(args.rounds):  # interleaved, so drift on a shared machine hits both alike
        for size in args.image_sizes:
            for name in args.precisions:
                for way in ("measured", "native only"):
                    with native_only(way == "native only"):
                        rate = speed_probes.time_network(
                            hp, name, args.steps, args.warmup, size, max_secs=None, evaluate=False
                        )
                        rate = rate["train"]
                    rates.setdefault("%s|%d|%s" % (name, size, way), []).append(round(rate, 1))
    print("\ntraining images/s, one tower, batch %d, best of %d rounds" % (args.batch_size, args.rounds))
    print("%-6s %6s %12s %12s %8s" % ("", "pixels", "native only", "measured", "speedup"))
    for size in args.image_sizes:
        for name in args.precisions:
            measured, native = (max(rates["%s|%d|%s" % (name, size, way)]) for way in ("measured", "native only"))
            print("%-6s %6d %12.1f %12.1f %8.2f" % (name, size, native, measured, measured / native))
            steps["%s_%d" % (name, size)] = {
                "native_only": native,
                "measured": measured,
                "speedup": round(measured / native, 3),
                "rounds": {way: rates["%s|%d|%s" % (name, size, way)] for way in ("measured", "native only")},
            }
    return steps


def main(argv=None):
    import tensorflow as tf

    from estimator.training.hparams import HParams

    args = parse_args(argv)
    print_machine()
    hp = HParams(
        data_dir="",
        job_dir="",
        num_gpus=0,
        network=args.network,
        group_depth=args.group_depth if args.network == "airbench" else 2,
        num_layers=args.num_layers,
        width_multiplier=args.width_multiplier,
        train_batch_size=args.batch_size,
        seed=0,
    )
    dtypes = {"bf16": tf.bfloat16, "fp32": tf.float32}
    if args.sweep:
        write_result(args.out, sweep(hp, args, dtypes))
        return 0
    result = {"network": args.network, "width_multiplier": args.width_multiplier, "batch_size": args.batch_size}
    result["shapes"] = shapes_table(hp, args, dtypes)
    result["steps"] = steps_table(hp, args)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
