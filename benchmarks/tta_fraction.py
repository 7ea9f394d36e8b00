"""What ``--tta-fraction`` costs and buys: one trained job's last checkpoint evaluated on the test split with
the test-time views for every image and for the least-confident fractions, side by side in one process.

    python -m benchmarks.tta_fraction --job-dir JOB [--fractions 1 0.5 0.25 0.125] [--repeats 2] [--out FILE]

JOB is a finished job of ``python -m estimator.cifar10_main`` (a recipe's, say). Each fraction is evaluated
``--repeats`` times and the fastest time kept (the first pays the graph's build and the records' first read alike).
Prints a table and writes JSON.
"""

import argparse
import time

from benchmarks.common import print_machine, write_result


def evaluate(hp, job_dir: str, fraction: float, repeats: int = 2) -> dict:
    import tensorflow as tf

    from estimator.data import records as fmt
    from estimator.train import input_fn
    from estimator.training.model_fn import model_fn

    params = hp.replace(eval_flip_tta=True, eval_tta=True, tta_fraction=fraction)
    config = tf.estimator.RunConfig(model_dir=job_dir)
    estimator_ = tf.estimator.Estimator(model_fn=model_fn, config=config, params=params)
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        metrics = estimator_.evaluate(input_fn(params, fmt.TEST), name="tta_fraction")
        seconds.append(time.perf_counter() - started)
    row = {k: float(metrics[k]) for k in ("accuracy", "accuracy_flip_tta", "accuracy_tta")}
    return dict(row, fraction=fraction, eval_secs=round(min(seconds), 2), images=int(metrics["eval_examples"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job-dir", required=True, help="A finished job's directory.")
    parser.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.125])
    parser.add_argument("--repeats", type=int, default=2, help="Evaluations of each fraction; the fastest is kept.")
    parser.add_argument("--out", default="benchmarks/results/tta_fraction.json", help="Where the JSON goes.")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats %d: evaluate each fraction at least once (e.g. --repeats 2)." % args.repeats)
    from estimator.training import config

    hp = config.load(args.job_dir)
    print_machine()
    rows = [evaluate(hp, args.job_dir, fraction, args.repeats) for fraction in args.fractions]
    print("| fraction | accuracy | flip TTA | TTA | evaluation s |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            "| %g | %.4f | %.4f | %.4f | %.1f |"
            % (row["fraction"], row["accuracy"], row["accuracy_flip_tta"], row["accuracy_tta"], row["eval_secs"])
        )
    write_result(args.out, {"job_dir": args.job_dir, "network": hp.network, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
