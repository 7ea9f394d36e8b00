"""The CIFAR-10 TFRecord format: the one place that defines it.

Both the converter (``estimator.data.convert``) and the input pipeline
(``estimator.cifar10``) import this module, so writer and reader cannot drift.

The record layout is the original tutorial's, so TFRecords written by the old
``generate_cifar10_tfrecords.py`` keep working:

* ``image``: the 3,072 raw bytes of one pickle row exactly as stored, in CHW
  order (1,024 red, then 1,024 green, then 1,024 blue values, row-major);
* ``label``: an int64 class id in 0..9.
"""

from __future__ import annotations

import json
import struct

from estimator.common import storage

HEIGHT = 32
WIDTH = 32
DEPTH = 3
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH  # 3,072
NUM_CLASSES = 10
# Pixels of zero padding on each side of a training image before its random 32x32 crop (He et al.
# 2016), and the most a crop may shift: half the image.
CROP_PADDING = 4
MAX_CROP_PADDING = HEIGHT // 2

# Label names in class-id order, as batches.meta's label_names.
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

IMAGE_KEY = "image"
LABEL_KEY = "label"

# Label given to padding rows of the last evaluation batch, so that every eval
# image is seen exactly once while batches keep a static, tower-divisible shape.
PAD_LABEL = -1

ARCHIVE_DIR = "cifar-10-batches-py"
OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
OFFICIAL_MD5 = "c58f30108f718f92721af3b95e74349a"

# The split of the original tutorial: batches 1-4 train, batch 5 validates
# (the data a hyperparameter study may look at), the test batch is held out.
SPLITS = {
    "train": ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4"),
    "validation": ("data_batch_5",),
    "eval": ("test_batch",),
}
SUBSETS = tuple(SPLITS)
# Their roles: training; the split periodic evaluations and tuning look at; the held-out test split.
TRAIN, VALIDATION, TEST = SUBSETS
MANIFEST_NAME = "cifar10_manifest.json"
MANIFEST_FORMAT = 1


def read_manifest(data_dir: str):
    """The parsed manifest of ``data_dir`` (local or ``gs://``), or None for records without one.

    Raises:
      ValueError: the manifest is malformed (``parse_manifest``).
    """
    path = storage.join(data_dir, MANIFEST_NAME)
    if not storage.exists(path):
        return None
    return parse_manifest(storage.read_text(path), path)


def record_filename(subset: str) -> str:
    """File name of a subset's TFRecords, e.g. ``train.tfrecords``."""
    if subset not in SPLITS:
        raise ValueError("Unknown subset %r: expected one of %s." % (subset, ", ".join(SUBSETS)))
    return subset + ".tfrecords"


def encode_example(image: bytes, label: int) -> bytes:
    """Serializes one image as a ``tf.train.Example`` in the original format."""
    import tensorflow as tf  # lazy: keep ``import estimator.data.records`` cheap

    if len(image) != IMAGE_BYTES:
        raise ValueError("An image must be %d bytes, got %d." % (IMAGE_BYTES, len(image)))
    feature = {
        IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


# TFRecord framing: a little-endian uint64 length and its CRC, the record, the record's CRC.
_LENGTH = struct.Struct("<Q")
_CRC_BYTES = 4


def count_records(fileobj, name: str) -> int:
    """Records in an open binary TFRecord file, read by their framing alone (no TensorFlow: its
    ``tf_record_iterator`` is deprecated and warns on every command that counts).

    Raises:
      ValueError: the file ends inside a record (``name`` names it).
    """
    count = 0
    while True:
        header = fileobj.read(_LENGTH.size + _CRC_BYTES)
        if not header:
            return count
        if len(header) < _LENGTH.size + _CRC_BYTES:
            raise ValueError("%s ends inside the header of record %d: the file is truncated." % (name, count + 1))
        (length,) = _LENGTH.unpack_from(header)
        body = fileobj.read(length + _CRC_BYTES)
        if len(body) < length + _CRC_BYTES:
            raise ValueError("%s ends inside record %d: the file is truncated." % (name, count + 1))
        count += 1


def feature_spec():
    """The ``tf.io.parse_example`` spec of a record."""
    import tensorflow as tf  # lazy: keep ``import estimator.data.records`` cheap

    return {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string), LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)}


def make_manifest(files: dict, source: dict) -> dict:
    """Builds the manifest written beside the records.

    Args:
      files: subset -> {"examples": int, "bytes": int, "sha256": str}.
      source: what the records were made from (name, checksums).
    """
    return {
        "format": MANIFEST_FORMAT,
        "files": {record_filename(s): dict(info, subset=s) for s, info in files.items()},
        "source": source,
    }


def parse_manifest(text: str, where: str) -> dict:
    """Parses and checks a manifest; ``where`` names it in errors."""
    try:
        manifest = json.loads(text)
        files = manifest["files"]
        for subset in SUBSETS:
            entry = files[record_filename(subset)]
            int(entry["examples"]), int(entry["bytes"]), str(entry["sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            "%s is not a valid CIFAR-10 manifest (%s): rerun generate_cifar10_tfrecords.py --overwrite." % (where, e)
        ) from e
    return manifest


def num_examples(manifest: dict, subset: str) -> int:
    """Number of examples of ``subset`` recorded in a parsed manifest."""
    return int(manifest["files"][record_filename(subset)]["examples"])
