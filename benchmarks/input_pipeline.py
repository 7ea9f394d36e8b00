"""Benchmarks the converter and the training input pipeline; prints a table, writes JSON.

    python -m benchmarks.input_pipeline --source ../shared/data/cifar-10-jpeg-python.tar.gz \
        --sha256 818d7f7e... --out benchmarks/results/input_pipeline.json

Measures, in one run on this machine:
  * converting the archive into TFRecords (wall time, fresh output directory);
  * images/s of the training pipeline (shuffle, repeat, decode, pad+crop+flip,
    batch 128, prefetch) and of a bare read-and-decode pipeline over the same
    file, alternating rounds so both see the same machine load.
"""

import argparse
import os
import platform
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from benchmarks.common import write_result  # noqa: E402
from estimator.data import records as fmt  # noqa: E402
from estimator.data.convert import convert  # noqa: E402
from estimator.data.pipeline import Cifar10DataSet, decode  # noqa: E402


def bare_pipeline(path, batch_size):
    """Read + decode only: the floor any pipeline over this file pays."""

    def parse(serialized):
        images, labels = decode(serialized)
        return tf.cast(images, tf.float32), labels

    return (
        tf.data.TFRecordDataset([path])
        .repeat()
        .batch(batch_size, drop_remainder=True)
        .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def images_per_second(dataset, batch_size, batches, warmup=20):
    it = iter(dataset)
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch_size / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="CIFAR-10 python archive (path or URL).")
    parser.add_argument("--sha256", default=None)
    parser.add_argument("--md5", default=None)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=400, help="Timed batches per round.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/input_pipeline.json")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as data_dir:
        start = time.perf_counter()
        manifest = convert(
            data_dir, source=args.source, sha256=args.sha256, md5=args.md5, progress=False, log=lambda *_: None
        )
        convert_seconds = time.perf_counter() - start
        total = sum(f["examples"] for f in manifest["files"].values())

        train_file = os.path.join(data_dir, fmt.record_filename("train"))
        pipelines = {
            "bare read+decode": bare_pipeline(train_file, args.batch_size),
            "training (shuffle+distort)": Cifar10DataSet(data_dir, "train", seed=0).dataset(args.batch_size),
        }
        rates = {name: [] for name in pipelines}
        for _ in range(args.rounds):
            for name, ds in pipelines.items():
                rates[name].append(images_per_second(ds, args.batch_size, args.batches))

    median = {name: sorted(r)[len(r) // 2] for name, r in rates.items()}
    ratio = median["training (shuffle+distort)"] / median["bare read+decode"]
    print(
        "Machine: %s, %d cores, Python %s, TensorFlow %s"
        % (platform.processor() or platform.machine(), os.cpu_count(), platform.python_version(), tf.__version__)
    )
    print("Convert %s: %d images in %.1f s" % (os.path.basename(args.source), total, convert_seconds))
    print("%-28s %12s  %s" % ("pipeline (batch %d)" % args.batch_size, "images/s", "rounds"))
    for name, r in rates.items():
        print("%-28s %12.0f  %s" % (name, median[name], " ".join("%.0f" % x for x in r)))
    print("training / bare: %.2f" % ratio)
    result = {
        "source": os.path.basename(args.source),
        "convert_images": total,
        "convert_seconds": round(convert_seconds, 2),
        "batch_size": args.batch_size,
        "images_per_sec": {k: round(v) for k, v in median.items()},
        "rounds": {k: [round(x) for x in v] for k, v in rates.items()},
        "training_over_bare": round(ratio, 3),
    }
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
