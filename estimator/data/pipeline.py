"""The CIFAR-10 input pipeline: ``Cifar10DataSet`` feeds an Estimator ``input_fn``.

Images come out as float32 NHWC ``[batch, 32, 32, 3]`` with values 0..255 (the
model rescales them), labels as int32 ``[batch]``.

Training batches are shuffled, repeated, and (with ``use_distortion``) padded
to 40x40, randomly cropped back to 32x32 and randomly flipped left-right, as in
He et al. 2016, Sec. 4.2 (``crop_padding`` sets the 4 pixels of padding); with
``cutout`` a square of that many pixels a side, centred anywhere in the image,
is then greyed out (DeVries & Taylor 2017). Decoding and distortion run on whole
batches (vectorised), not per image: per-image ``map`` calls cost more than the
work they do at this image size. Random draws are stateless, seeded by
``(seed, batch index)``, so a fixed ``seed`` gives the same batches every run.

Evaluation batches hold every image of the split exactly once: the last,
short batch is padded to full size with ``PAD_LABEL`` (-1) labels, which the
model gives zero weight, so batch shapes stay static and divisible by towers.
"""

from __future__ import annotations

import io
import os
import random

import tensorflow as tf

from estimator.common import storage
from estimator.data import records as fmt

PAD, MAX_PAD = fmt.CROP_PADDING, fmt.MAX_CROP_PADDING
# What cutout fills its square with: mid-grey, 0 after the model's scaling x / 128 - 1 (DeVries &
# Taylor 2017 zero the normalised image, i.e. fill with the mean).
CUTOUT_FILL = 128


class MissingDataError(ValueError):
    """The TFRecords a data set needs are not there."""


def _missing(data_dir: str, what: str) -> MissingDataError:
    return MissingDataError(
        "%s: no %s. Run generate_cifar10_tfrecords.py --data-dir=%s first."
        % (data_dir or "(empty --data-dir)", what, data_dir or "DIR")
    )


class CorruptDataError(MissingDataError):
    """The TFRecords disagree with the manifest written beside them."""


def _count_records(path: str, fix: str) -> int:
    """Records in one TFRecord file (local, streamed; or on Cloud Storage, read whole)."""
    try:
        if storage.is_gcs(path):
            return fmt.count_records(io.BytesIO(storage.read_bytes(path)), path)
        with open(path, "rb") as f:
            return fmt.count_records(f, path)
    except ValueError as e:
        raise CorruptDataError("%s %s" % (e, fix)) from e


def verify_splits(data_dir: str, train_subsets=(fmt.TRAIN,)) -> int:
    """Checks every split's records against the manifest (``_check_against_manifest``); returns the
    number of training images (of ``train_subsets`` together). One read of the manifest and one size per
    split, wherever the data lives: on Cloud Storage each is a round trip, and a job starts after them.

    Raises:
      MissingDataError: a split is missing or disagrees with the manifest (the message says how to fix it).
    """
    if not data_dir:
        raise _missing(data_dir, fmt.record_filename(fmt.TRAIN))
    manifest = fmt.read_manifest(data_dir)
    sizes = {}
    for subset in fmt.SUBSETS:
        sizes[subset] = storage.size(storage.join(data_dir, fmt.record_filename(subset)))
        if sizes[subset] is None:
            raise _missing(data_dir, fmt.record_filename(subset))
    if manifest is None:  # records of the original tool: nothing to compare with, the training files counted
        return sum(_count_records(storage.join(data_dir, fmt.record_filename(s)), _RECOUNT) for s in train_subsets)
    for subset in fmt.SUBSETS:
        _check_against_manifest(data_dir, subset, sizes[subset], manifest)
    return sum(fmt.num_examples(manifest, subset) for subset in train_subsets)


_RECOUNT = "Rewrite the records with generate_cifar10_tfrecords.py --overwrite."
_REWRITE = (
    "Rewrite the records: python generate_cifar10_tfrecords.py --data-dir=%s --overwrite (with the --source you used)."
)


def _check_against_manifest(data_dir: str, subset: str, size: int, manifest: dict) -> None:
    """Raises CorruptDataError where a split's file is not the size its manifest says, or (a local file)
    does not hold as many records: an interrupted copy or a replaced file would otherwise train for hours
    and then fail in the evaluation ("DataLossError: truncated record"), or silently use other data."""
    path = storage.join(data_dir, fmt.record_filename(subset))
    entry = manifest["files"][fmt.record_filename(subset)]
    if size != int(entry["bytes"]):
        said = "%s says %s" % (fmt.MANIFEST_NAME, format(int(entry["bytes"]), ","))
        raise CorruptDataError("%s holds %s bytes but %s. %s" % (path, format(size, ","), said, _REWRITE % data_dir))
    if not storage.is_gcs(path):
        count = _count_records(path, _REWRITE % data_dir)
        if count != int(entry["examples"]):
            said = "%s says %s" % (fmt.MANIFEST_NAME, format(int(entry["examples"]), ","))
            raise CorruptDataError(
                "%s holds %s records but %s. %s" % (path, format(count, ","), said, _REWRITE % data_dir)
            )


def decode(serialized):
    """Parses a batch of serialized records into (uint8 NHWC images, int32 labels)."""
    features = tf.io.parse_example(serialized, fmt.feature_spec())
    image = tf.io.decode_raw(features[fmt.IMAGE_KEY], tf.uint8)
    # Records store the pickle's CHW bytes; the model wants NHWC.
    image = tf.reshape(image, [-1, fmt.DEPTH, fmt.HEIGHT, fmt.WIDTH])
    image = tf.transpose(image, [0, 2, 3, 1])
    return image, tf.cast(features[fmt.LABEL_KEY], tf.int32)


def distort(images, seed, cutout: int = 0, padding: int = PAD):
    """Pads each image by ``padding`` pixels (to 40x40), crops a random 32x32 window, maybe flips it,
    and (``cutout`` > 0) greys out a ``cutout`` x ``cutout`` square centred on a random pixel, clipped
    at the borders.

    Crop and flip are one gather of whole pixels from the padded images through
    per-image indices: about twice as fast here as cropping rows, then columns,
    then reversing (measured with benchmarks/input_pipeline.py).

    Args:
      images: ``[B, 32, 32, C]`` tensor.
      seed: shape ``[2]`` int tensor for the stateless random draws.
      cutout: side of the square in pixels; 0: none.
      padding: zero pixels added on each side before the crop: shifts of up to that many pixels.
    """
    batch, channels = tf.shape(images)[0], tf.shape(images)[3]
    size = fmt.HEIGHT + 2 * padding
    padded = tf.pad(images, [[0, 0], [padding, padding], [padding, padding], [0, 0]])
    draws = tf.random.stateless_uniform([batch, 3], seed=seed)
    offsets = tf.cast(draws[:, :2] * (2 * padding + 1), tf.int32)  # 0..8 for rows, cols with 4
    flip = draws[:, 2] < 0.5
    cols = tf.range(fmt.WIDTH)
    cols = tf.where(flip[:, None], fmt.WIDTH - 1 - cols, cols) + offsets[:, 1:2]  # [B, 32]
    rows = tf.range(fmt.HEIGHT)[None, :] + offsets[:, 0:1]  # [B, 32]
    index = tf.reshape(rows[:, :, None] * size + cols[:, None, :], [batch, -1])  # [B, 1024]
    pixels = tf.gather(tf.reshape(padded, [batch, size * size, channels]), index, batch_dims=1)
    images = tf.reshape(pixels, [batch, fmt.HEIGHT, fmt.WIDTH, channels])
    if cutout:
        images = _cut_out(images, tf.random.experimental.stateless_fold_in(seed, 1), cutout)
    return images


def _cut_out(images, seed, size: int):
    """Greys out a ``size`` x ``size`` square per image, centred on a random pixel (rows and columns
    ``centre - size // 2`` up to, not including, ``centre - size // 2 + size``), clipped at the borders.
    Its own draws (a seed folded from the crop's), so cropping and flipping stay as without it."""
    batch = tf.shape(images)[0]
    centres = tf.random.stateless_uniform([batch, 2], seed=seed, maxval=fmt.HEIGHT, dtype=tf.int32)
    first = centres - size // 2
    rows, cols = (tf.range(n)[None, :] - first[:, i : i + 1] for i, n in ((0, fmt.HEIGHT), (1, fmt.WIDTH)))
    inside_rows = (rows >= 0) & (rows < size)  # [B, 32]
    inside_cols = (cols >= 0) & (cols < size)
    inside = inside_rows[:, :, None, None] & inside_cols[:, None, :, None]  # [B, 32, 32, 1]
    return tf.where(inside, tf.constant(CUTOUT_FILL, images.dtype), images)


# XLA fuses pad, index arithmetic, gather and cast into one kernel: about 1.3x
# the throughput of the same ops run one by one (benchmarks/input_pipeline.py).
@tf.function(jit_compile=True)
def _distort_to_float(images, seed, cutout: int = 0, padding: int = PAD):
    return tf.cast(distort(images, seed, cutout, padding), tf.float32)


def pipeline_options() -> tf.data.Options:
    """tf.data's autotuning model off: ``AUTOTUNE`` then means one parallel call per core and a
    prefetch buffer that grows when it runs dry, which keep this pipeline far ahead of training
    (docs/speed.md). Why off: closing a session waits for the autotuning thread, and in TF 2.15 that
    thread can miss the cancellation and sleep out its period, which doubles up to a minute; so the
    end of ``Estimator.train`` or ``evaluate`` stalled for up to 53 s in about one run in four here
    (seen in gdb: ``RootDataset::Iterator::~Iterator`` waiting on ``Model::OptimizeLoop``), past a
    ``--time-budget``'s end."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


class Cifar10DataSet(object):
    """CIFAR-10 TFRecords of one subset, as written by generate_cifar10_tfrecords.py."""

    def __init__(
        self,
        data_dir: str,
        subset: str = fmt.TRAIN,
        use_distortion: bool = True,
        seed=None,
        also=(),
        cutout: int = 0,
        crop_padding: int = PAD,
    ):
        """
        Args:
          data_dir: directory (or ``gs://`` path) holding the TFRecords.
          subset: ``train``, ``validation`` or ``eval``.
          use_distortion: crop and flip training images (ignored for other subsets).
          cutout: with ``use_distortion``, also grey out a square of this side (0: none).
          crop_padding: with ``use_distortion``, the padding before the random crop (0: flips only).
          seed: seed for shuffling and distortion; None draws one.
          also: further subsets to train on with ``train`` (``validation``: a final model on
            50,000 images); shuffled together, counted together.

        Raises:
          ValueError: unknown subset.
          MissingDataError: the subset's TFRecords are not in ``data_dir``.
        """
        for name in (subset,) + tuple(also):
            fmt.record_filename(name)  # validates subset
        if also and subset != fmt.TRAIN:
            raise ValueError("only training reads several subsets, not %s." % subset)
        if not 0 <= cutout <= fmt.HEIGHT:
            raise ValueError("cutout %s must be a square side from 0 to %d pixels." % (cutout, fmt.HEIGHT))
        if not 0 <= crop_padding <= MAX_PAD:
            raise ValueError("crop padding %s must be from 0 to %d pixels." % (crop_padding, MAX_PAD))
        self.cutout = int(cutout)
        self.crop_padding = int(crop_padding)
        self.data_dir = data_dir
        self.subset = subset
        self.also = tuple(s for s in also if s != subset)
        self.use_distortion = use_distortion
        self.seed = random.SystemRandom().randrange(2**31) if seed is None else int(seed)
        for path in self.get_filenames() if data_dir else [None]:
            if path is None or not storage.exists(path):
                raise _missing(data_dir, os.path.basename(path) if path else fmt.record_filename(subset))
        self._manifest = fmt.read_manifest(data_dir)

    def get_filenames(self):
        return [storage.join(self.data_dir, fmt.record_filename(s)) for s in (self.subset,) + self.also]

    def num_examples_per_epoch(self, subset=None) -> int:
        """Images in ``subset`` (default: this one and the ``also`` ones), from the manifest or the file."""
        if subset is None:
            return sum(self.num_examples_per_epoch(s) for s in (self.subset,) + self.also)
        if self._manifest is not None:
            return fmt.num_examples(self._manifest, subset)
        # Records made by the original tool have no manifest: count them.
        path = storage.join(self.data_dir, fmt.record_filename(subset))
        if not storage.exists(path):
            raise _missing(self.data_dir, fmt.record_filename(subset))
        return _count_records(path, _RECOUNT)

    def dataset(self, batch_size: int):
        """A ``tf.data.Dataset`` of ``(images, labels)`` batches (see module doc)."""
        if batch_size < 1:
            raise ValueError("batch_size must be positive, got %d." % batch_size)
        records = tf.data.TFRecordDataset(self.get_filenames())
        if self.subset == fmt.TRAIN:
            # The training set fits in memory: a full shuffle buffer is a true permutation each epoch, and
            # the files are read once (cache), not again from gs:// every epoch.
            epoch_size = self.num_examples_per_epoch()
            records = records.cache().shuffle(epoch_size, seed=self.seed, reshuffle_each_iteration=True)
            batches = records.repeat().batch(batch_size, drop_remainder=True).enumerate()
            distort_images, cutout, padding = self.use_distortion, self.cutout, self.crop_padding

            def parse(index, serialized):
                images, labels = decode(serialized)
                if distort_images:
                    seed = tf.stack([tf.cast(self.seed, tf.int64), index])
                    images = _distort_to_float(images, seed, cutout, padding)
                else:
                    images = tf.cast(images, tf.float32)
                images.set_shape([batch_size, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH])
                labels.set_shape([batch_size])
                return images, labels
        else:
            batches = records.batch(batch_size)

            def parse(serialized):
                images, labels = decode(serialized)
                missing = batch_size - tf.shape(labels)[0]
                images = tf.pad(images, [[0, missing], [0, 0], [0, 0], [0, 0]])
                labels = tf.pad(labels, [[0, missing]], constant_values=fmt.PAD_LABEL)
                images = tf.cast(images, tf.float32)
                images.set_shape([batch_size, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH])
                labels.set_shape([batch_size])
                return images, labels

        pipeline = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return pipeline.prefetch(tf.data.AUTOTUNE).with_options(pipeline_options())

    def first_images(self, count: int):
        """The first ``count`` images (all, if the file holds fewer) of the subset's first file, in
        file order and undistorted: float32 ``[n, 32, 32, 3]`` with values 0..255, read in the graph
        when evaluated (AirbenchCifar10 estimates its whitening from them)."""
        if count < 1:
            raise ValueError("count must be positive, got %d." % count)
        count = min(count, self.num_examples_per_epoch(self.subset))
        records = tf.data.TFRecordDataset(self.get_filenames()[:1]).take(count).batch(count)
        images, _ = tf.data.experimental.get_single_element(records.map(decode))
        images = tf.cast(images, tf.float32)
        images.set_shape([count, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH])
        return images

    def make_batch(self, batch_size: int):
        """``(images, labels)`` tensors of the next batch, for a graph-mode ``input_fn``."""
        return tf.compat.v1.data.make_one_shot_iterator(self.dataset(batch_size)).get_next()
