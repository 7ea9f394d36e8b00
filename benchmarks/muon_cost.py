"""What Muon's step costs against SGD's, and how much of it is the Newton-Schulz iteration. Side by side, one run.

    python -m benchmarks.muon_cost --width-multiplier 1.0 --precision bf16 --batch-size 512

Each variant builds ``model_fn``'s training graph of airbench's family on random images (the whitening from random
ones too) and times its steps in one session after a warm-up, best of ``--rounds``: SGD; Muon; Muon with its
iteration cut to one step and to none (the update then only Nesterov momentum and renormalisation). Prints a table
and writes JSON.
"""

from __future__ import annotations

import argparse
import sys
import time

import tensorflow as tf

from benchmarks.common import print_machine, write_result
from estimator.training import model_fn as model_fn_lib
from estimator.training import muon
from estimator.training.hparams import HParams

v1 = tf.compat.v1
VARIANTS = (("sgd", None), ("muon", muon.NEWTON_SCHULZ_STEPS), ("muon", 1), ("muon", 0))


class _RandomWhitening:
    """Stands for the records the whitening kernel is computed from: random images."""

    def __init__(self, *_):
        pass

    def first_images(self, n):
        return tf.random.stateless_uniform([n, 32, 32, 3], seed=[1, 2], maxval=255.0)


def seconds_per_step(hp: HParams, steps: int, warmup: int, iteration_steps=None) -> float:
    """The mean seconds of ``steps`` training steps of ``hp``'s graph after ``warmup``; under Muon with its
    iteration cut to ``iteration_steps`` (None: as it is)."""
    real = muon.newton_schulz
    if iteration_steps is not None:
        muon.newton_schulz = lambda matrix, **kw: real(matrix, **dict(kw, steps=iteration_steps))
    data = model_fn_lib.Cifar10DataSet
    model_fn_lib.Cifar10DataSet = _RandomWhitening
    try:
        with tf.Graph().as_default():
            images = tf.random.uniform([hp.train_batch_size, 32, 32, 3], maxval=255.0, seed=1)
            labels = tf.random.uniform([hp.train_batch_size], maxval=10, dtype=tf.int32, seed=2)
            spec = model_fn_lib.model_fn(images, labels, tf.estimator.ModeKeys.TRAIN, hp)
            config = v1.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=2)
            with v1.Session(config=config) as sess:
                sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
                for _ in range(warmup):
                    sess.run(spec.train_op)
                start = time.perf_counter()
                for _ in range(steps):
                    sess.run(spec.train_op)
                return (time.perf_counter() - start) / steps
    finally:
        muon.newton_schulz, model_fn_lib.Cifar10DataSet = real, data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width-multiplier", type=float, default=1.0)
    parser.add_argument("--group-depth", type=int, default=2)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/muon_cost.json")
    args = parser.parse_args(argv)
    print_machine()
    base = HParams(
        data_dir="unused",
        job_dir="unused",
        network="airbench",
        width_multiplier=args.width_multiplier,
        group_depth=args.group_depth,
        precision=args.precision,
        num_gpus=0,
        train_batch_size=args.batch_size,
        train_steps=1000,
        lr_schedule="cosine",
        health_checks="off",
        histograms=False,
    )
    best = {}
    for _ in range(args.rounds):
        for name, iteration in VARIANTS:
            key = name if iteration in (None, muon.NEWTON_SCHULZ_STEPS) else "%s, %d-step iteration" % (name, iteration)
            hp = base.replace(optimizer=name)
            secs = seconds_per_step(hp, args.steps, args.warmup, None if iteration is None else iteration)
            best[key] = min(best.get(key, secs), secs)
    rows = [{"variant": k, "secs_per_step": round(v, 4), "vs_sgd": round(v / best["sgd"], 3)} for k, v in best.items()]
    print("\n%-28s %12s %8s" % ("variant", "s/step", "vs SGD"))
    for row in rows:
        print("%-28s %12.4f %8.3f" % (row["variant"], row["secs_per_step"], row["vs_sgd"]))
    write_result(args.out, {"args": vars(args), "rows": rows})
    print("\nwrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
