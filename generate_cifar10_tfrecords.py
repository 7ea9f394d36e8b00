#!/usr/bin/env python
"""Writes CIFAR-10 train/validation/eval TFRecords: see ``estimator.data.convert``.

python generate_cifar10_tfrecords.py --data-dir=/tmp/cifar-10-data
python generate_cifar10_tfrecords.py --data-dir=gs://BUCKET/cifar-10-data
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter out

from estimator.common import logs, processes  # noqa: E402

logs.quiet_imports()

with processes.imports_uncollected():
    from estimator.data.convert import main

if __name__ == "__main__":
    processes.exit_with(main())
