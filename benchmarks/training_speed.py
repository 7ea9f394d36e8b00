"""Training speed: ours against Keras ``model.fit`` and PyTorch, fp32 and bf16, in one run.

    python -m benchmarks.training_speed --data-dir work/cifar-10-full
    python -m benchmarks.training_speed --data-dir D --depths 20 56 --batch-sizes 128 256 --rounds 2
    python -m benchmarks.training_speed --data-dir D --network airbench --batch-sizes 512

For each depth, rounds alternate every trainer so all see the same machine load:
our Estimator ``model_fn`` (``--precision fp32`` and ``bf16``), the same network
in Keras ``model.fit`` (float32 and the ``mixed_bfloat16`` policy) and in
PyTorch (float32 and ``torch.autocast('cpu', torch.bfloat16)``; only if torch is
installed: ``pip install -e .[bench]``). All read the same TFRecords through the
same input pipeline. The best round is reported. Each rate is also given as a
fraction of the matrix-product FLOP/s measured at the start of the same run
(2048x2048, fp32 and bf16), counting 3x the forward FLOPs per training image;
with torch installed, PyTorch's matrix product on the same cores is recorded too
(``torch_matmul_gflops``: the anchor, where a library beats TensorFlow's).
The training input pipeline alone is timed too: it must stay well ahead (5x) of
what the fastest trainer consumes.

``--network airbench`` times the recipes' network instead of the ResNets (its
GELU fused into XLA kernels in ours, tf.nn.gelu's ops in Keras, as each
framework runs it; no PyTorch version of it here).
"""

import argparse
import os
import sys
import time

from benchmarks.common import print_machine, write_result

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from benchmarks import keras_vs_estimator as kv  # noqa: E402
from benchmarks.input_pipeline import images_per_second  # noqa: E402
from estimator.data.pipeline import Cifar10DataSet  # noqa: E402
from estimator.networks import registry  # noqa: E402
from estimator.networks.airbench import GROUP_DEPTHS  # noqa: E402
from estimator.training.hparams import HParams  # noqa: E402

v1 = tf.compat.v1


def matmul_gflops(dtype, n=2048, repeats=10) -> float:
    a = tf.cast(tf.random.normal([n, n], seed=0), dtype)
    f = tf.function(lambda: tf.matmul(a, a))
    f().numpy()
    start = time.perf_counter()
    for _ in range(repeats):
        out = f()
    out.numpy()
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e9


def torch_matmul_gflops(precision, n=2048, repeats=10) -> float:
    """PyTorch's matrix product on the same cores: the physical anchor wherever it beats TensorFlow's."""
    import torch

    torch.set_num_threads(os.cpu_count())
    a = torch.randn(n, n).to(torch.bfloat16 if precision == "bf16" else torch.float32)
    torch.matmul(a, a)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.matmul(a, a)
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e9


def forward_flops(num_layers: int = 20, group_depth: int = 0, width_multiplier: float = 1.0) -> int:
    """Floating-point operations of one image's forward pass (``registry.forward_flops``): ResNet-``num_layers``,
    or (``group_depth`` 2 or 3) the airbench network at ``width_multiplier``."""
    network = {"network": "airbench", "group_depth": group_depth} if group_depth else {"num_layers": num_layers}
    return registry.forward_flops(HParams(data_dir="", job_dir="", width_multiplier=width_multiplier, **network))


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def trainers(with_torch: bool):
    """name -> (precision, function of (args) returning images/s)."""
    out = {
        "ours fp32": ("fp32", lambda a: kv.estimator_rate(a, "fp32")),
        "keras fp32": ("fp32", lambda a: kv.keras_rate(a, "float32")),
        "ours bf16": ("bf16", lambda a: kv.estimator_rate(a, "bf16")),
        "keras mixed_bfloat16": ("bf16", lambda a: kv.keras_rate(a, "mixed_bfloat16")),
    }
    if with_torch:
        from benchmarks import torch_resnet

        def torch_rate(a, bf16):
            data = Cifar10DataSet(a.data_dir, "train", seed=0).dataset(a.batch_size)
            return torch_resnet.rate(
                data, a.num_layers, a.batch_size, a.steps, a.warmup, bf16=bf16, batch_norm_decay=a.batch_norm_decay
            )

        out["pytorch fp32"] = ("fp32", lambda a: torch_rate(a, False))
        out["pytorch bf16 autocast"] = ("bf16", lambda a: torch_rate(a, True))
    return out


RATIOS = [
    ("ours bf16", "keras mixed_bfloat16", 1.2),
    ("ours bf16", "pytorch bf16 autocast", 1.4),
    ("ours bf16", "ours fp32", 2.0),
    ("ours fp32", "keras fp32", 1.05),
    ("ours fp32", "pytorch fp32", None),
]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--network", choices=("resnet", "airbench"), default="resnet")
    parser.add_argument("--depths", type=int, nargs="+", default=[20, 56], help="--network resnet: ResNet depths.")
    parser.add_argument(
        "--group-depth", type=int, choices=GROUP_DEPTHS, default=2, help="--network airbench: 2 (airbench94) or 3."
    )
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[128],
        help="Every trainer at the first; ours fp32 also at the others (the best batch).",
    )
    parser.add_argument(
        "--width-multiplier", type=float, default=1.0, help="--network airbench: its filters times this."
    )
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=("fp32", "bf16"),
        default=["fp32", "bf16"],
        help="fp32 alone where oneDNN is held below bf16 (ONEDNN_MAX_CPU_ISA=AVX2: bf16 aborts there).",
    )
    parser.add_argument("--batch-norm-decay", type=float, default=0.997)
    parser.add_argument("--steps", type=int, default=40, help="Timed fp32 steps per round.")
    parser.add_argument(
        "--bf16-steps",
        type=int,
        default=None,
        help="Timed bf16 steps per round (default --steps; fewer where bf16 is emulated).",
    )
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-torch", action="store_true", help="Leave PyTorch out even if installed.")
    parser.add_argument("--out", default="benchmarks/results/training_speed.json")
    return parser.parse_args(argv)


def networks_timed(args) -> dict:
    """Each network timed, by label (ResNet-20, ..., or airbench94 / airbench96 by its group depth, with its
    width): (num_layers, group_depth), as forward_flops takes them."""
    if args.network == "airbench":
        width = "" if args.width_multiplier == 1 else " x%g" % args.width_multiplier
        return {"airbench%d%s" % (90 + 2 * args.group_depth, width): (0, args.group_depth)}
    return {"ResNet-%d" % d: (d, 0) for d in args.depths}


def run_args(args, depth, batch_size, steps) -> argparse.Namespace:
    """What keras_vs_estimator's timers take: this network at ``batch_size`` for ``steps``."""
    return argparse.Namespace(
        data_dir=args.data_dir,
        network=args.network,
        group_depth=args.group_depth,
        num_layers=depth,
        width_multiplier=args.width_multiplier,
        batch_size=batch_size,
        steps=steps,
        warmup=args.warmup,
        batch_norm_decay=args.batch_norm_decay,
    )


def time_rounds(args, table, label, depth):
    """Every trainer of ``table`` in turn, ``args.rounds`` times, so all see the same machine load; ours fp32
    at the further batch sizes in each round. Returns ({trainer: [images/s]}, {batch size: [images/s]})."""
    batch = args.batch_sizes[0]
    rounds = {name: [] for name in table}
    extra = {b: [] for b in args.batch_sizes[1:]}
    for r in range(args.rounds):
        for name, (precision, fn) in table.items():
            steps = args.steps if precision == "fp32" else (args.bf16_steps or args.steps)
            rate = fn(run_args(args, depth, batch, steps))
            rounds[name].append(rate)
            print("  round %d %s %-22s %8.1f images/s" % (r + 1, label, name, rate), flush=True)
        for b in extra:
            extra[b].append(kv.estimator_rate(run_args(args, depth, b, max(4, args.steps * batch // b)), "fp32"))
    return rounds, extra


def network_row(label, batch, flops, peak, table, rounds, extra) -> dict:
    """Prints one network's table (best round, its share of the matrix rate, the ratios against their
    targets, ours at the further batches) and returns its entry of the JSON."""
    best = {name: max(v) for name, v in rounds.items()}
    print(
        "\n%s, batch %d, %.1f MFLOP per training image, best of %d rounds"
        % (label, batch, flops / 1e6, len(next(iter(rounds.values()))))
    )
    print("%-24s %10s %12s  %s" % ("trainer", "images/s", "of matmul", "rounds"))
    rows = {}
    for name, rate in best.items():
        fraction = rate * flops / 1e9 / peak[table[name][0]]
        rows[name] = {
            "images_per_sec": round(rate, 1),
            "rounds": [round(x, 1) for x in rounds[name]],
            "fraction_of_matmul_flops": round(fraction, 3),
        }
        print("%-24s %10.1f %11.1f%%  %s" % (name, rate, 100 * fraction, " ".join("%.1f" % x for x in rounds[name])))
    ratios = {}
    for a, b, target in RATIOS:
        if a in best and b in best:
            ratios["%s / %s" % (a, b)] = {"ratio": round(best[a] / best[b], 3), "target": target}
            print(
                "%-44s %6.2f  %s"
                % ("%s / %s" % (a, b), best[a] / best[b], "(target >= %.2f)" % target if target else "")
            )
    for b, rates in extra.items():
        print("ours fp32 at batch %d: %.1f images/s (rounds %s)" % (b, max(rates), " ".join("%.1f" % x for x in rates)))
    return {
        "forward_flops": flops // 3,
        "batch_size": batch,
        "trainers": rows,
        "ratios": ratios,
        "ours_fp32_other_batches": {str(b): round(max(r), 1) for b, r in extra.items()},
    }


def pipeline_row(data_dir, batch, section) -> dict:
    """The training input pipeline alone, against what our fastest trainer consumed."""
    pipeline = images_per_second(Cifar10DataSet(data_dir, "train", seed=0).dataset(batch), batch, 150)
    fastest = max(
        row["images_per_sec"]
        for d in section.values()
        for name, row in d["trainers"].items()
        if name.startswith("ours")
    )
    print(
        "\ninput pipeline (shuffle, crop, flip, batch %d): %.0f images/s, %.1fx what our fastest trainer consumed"
        % (batch, pipeline, pipeline / fastest)
    )
    return {"images_per_sec": round(pipeline, 1), "over_fastest_trainer": round(pipeline / fastest, 1)}


def main(argv=None):
    args = parse_args(argv)
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    print_machine()
    dtypes = {"fp32": tf.float32, "bf16": tf.bfloat16}
    peak = {p: matmul_gflops(dtypes[p]) for p in args.precisions}
    print("matmul 2048x2048: %s" % ", ".join("%s %.0f GFLOP/s" % kv for kv in peak.items()))
    use_torch = torch_available() and not args.no_torch
    anchor = {p: torch_matmul_gflops(p) for p in args.precisions} if use_torch else {}
    if anchor:
        print("PyTorch's matmul 2048x2048: %s" % ", ".join("%s %.0f GFLOP/s" % kv for kv in anchor.items()))
    airbench = args.network == "airbench"
    with_torch = use_torch and not airbench
    if airbench:
        print("No PyTorch version of the airbench network here: its rows are left out.")
    elif not with_torch:
        print("PyTorch not installed (pip install -e .[bench]): its rows are left out.")
    table = {name: row for name, row in trainers(with_torch).items() if row[0] in args.precisions}
    batch = args.batch_sizes[0]
    # In the JSON: "depths" by depth (ResNets), "networks" by label (airbench).
    section = {}
    for label, (depth, group_depth) in networks_timed(args).items():
        flops = 3 * forward_flops(depth, group_depth, args.width_multiplier)  # forward + backward (twice)
        rounds, extra = time_rounds(args, table, label, depth)
        section[label if airbench else str(depth)] = network_row(label, batch, flops, peak, table, rounds, extra)
    result = {"matmul_gflops": {k: round(v, 1) for k, v in peak.items()}, "networks" if airbench else "depths": section}
    result["torch_matmul_gflops"] = {k: round(v, 1) for k, v in anchor.items()}
    result["input_pipeline"] = pipeline_row(args.data_dir, batch, section)
    result["settings"] = vars(args)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
