"""Cifar10DataSet: exact eval images, valid distortions, seeds, missing data."""

import os

import numpy as np
import pytest
import tensorflow as tf

from estimator.data import records as fmt
from estimator.data.convert import convert
from estimator.data.pipeline import CUTOUT_FILL, Cifar10DataSet, CorruptDataError, MissingDataError, distort
from tests import cifar_archives as ca


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Records with train 4+3+5+2 = 14, validation 6, eval 7 images of known values."""
    tmp = tmp_path_factory.mktemp("small")
    sha, batches = ca.make_archive(str(tmp / "a.tar.gz"), sizes=(4, 3, 5, 2, 6, 7))
    convert(str(tmp / "data"), source=str(tmp / "a.tar.gz"), sha256=sha, progress=False, log=lambda *_: None)
    return str(tmp / "data"), batches


def hwc(rows):
    return rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32)


def test_eval_sees_every_image_exactly_once_in_order(small):
    data_dir, batches = small
    images, labels = [], []
    for x, y in Cifar10DataSet(data_dir, "eval").dataset(3):  # 7 = 3 + 3 + 1 (+2 padding)
        assert x.shape == (3, 32, 32, 3) and x.dtype == tf.float32 and y.dtype == tf.int32
        images.append(x.numpy())
        labels.append(y.numpy())
    images, labels = np.concatenate(images), np.concatenate(labels)
    want = batches["test_batch"]
    assert labels.tolist() == want[b"labels"] + [fmt.PAD_LABEL] * 2
    np.testing.assert_array_equal(images[:7], hwc(want[b"data"]))
    np.testing.assert_array_equal(images[7:], 0)


def test_make_batch_is_graph_mode_tensors(small):
    data_dir, batches = small
    with tf.Graph().as_default():
        x, y = Cifar10DataSet(data_dir, "validation").make_batch(6)
        with tf.compat.v1.Session() as sess:
            xv, yv = sess.run([x, y])
    assert yv.tolist() == batches["data_batch_5"][b"labels"]
    np.testing.assert_array_equal(xv, hwc(batches["data_batch_5"][b"data"]))


@pytest.mark.parametrize("subset", ["train", "validation", "eval"])
def test_pipelines_run_without_the_autotuning_thread(small, subset):
    # Closing a session waited up to a minute for that thread (estimator.cifar10.pipeline_options);
    # with it off the map still runs in parallel, one call per core.
    data = Cifar10DataSet(small[0], subset, seed=1).dataset(2)
    assert data.options().autotune.enabled is False
    assert tf.data.Options().autotune.enabled is not False  # so the line above checks our setting


def test_training_batches_without_distortion_are_a_shuffled_epoch(small):
    data_dir, batches = small
    train = np.concatenate([hwc(batches[n][b"data"]) for n in fmt.SPLITS["train"]])
    x, y = next(iter(Cifar10DataSet(data_dir, "train", use_distortion=False, seed=3).dataset(14)))
    order = [int(np.flatnonzero((train == img).all(axis=(1, 2, 3)))[0]) for img in x.numpy()]
    assert sorted(order) == list(range(14)) and order != list(range(14))


def test_training_reads_its_files_once_and_later_epochs_come_from_memory(small, tmp_path):
    """On gs:// every epoch read the records again (its shuffle buffer refilled from Cloud Storage before its first
    batch): the first batch reads the whole epoch, and the files may be gone after it."""
    import shutil

    data_dir = str(tmp_path / "data")
    shutil.copytree(small[0], data_dir)
    batches = iter(Cifar10DataSet(data_dir, "train", also=("validation",), use_distortion=False, seed=3).dataset(5))
    first = [next(batches)[1].numpy()]
    for name in os.listdir(data_dir):
        os.remove(os.path.join(data_dir, name))
    labels = np.concatenate(first + [next(batches)[1].numpy() for _ in range(15)])  # 80 images: 4 epochs of 20
    want = small[1]
    every = sorted(sum((want[n][b"labels"] for n in fmt.SPLITS["train"] + fmt.SPLITS["validation"]), []))
    assert [sorted(labels[i : i + 20].tolist()) for i in range(0, 80, 20)] == [every] * 4


@pytest.mark.parametrize("padding,min_offsets", [(4, 20), (2, 12), (0, 1)])
def test_distortion_is_a_padded_crop_maybe_flipped(padding, min_offsets):
    rng = np.random.RandomState(0)
    images = rng.randint(1, 256, size=(64, 32, 32, 3)).astype(np.uint8)  # no zeros inside
    out = distort(tf.constant(images), tf.constant([5, 0], tf.int64), padding=padding).numpy()
    padded = np.pad(images, [(0, 0), (padding, padding), (padding, padding), (0, 0)])
    offsets, flips = set(), 0
    shifts = range(2 * padding + 1)
    for i in range(64):
        match = [
            (dy, dx, f)
            for dy in shifts
            for dx in shifts
            for f in (0, 1)
            if np.array_equal(out[i], (lambda c: c[:, ::-1] if f else c)(padded[i, dy : dy + 32, dx : dx + 32]))
        ]
        assert match, "image %d is not a crop of its padded source" % i
        offsets.add(match[0][:2])
        flips += match[0][2]
    # Really random, both ways, and every shift within the padding (5 x 5 = 25 shifts for 2).
    assert min_offsets <= len(offsets) <= len(shifts) ** 2 and 16 < flips < 48
    if padding == 4:  # the default: the same draws as before the padding was a parameter
        np.testing.assert_array_equal(out, distort(tf.constant(images), tf.constant([5, 0], tf.int64)).numpy())
    with pytest.raises(ValueError, match="crop padding 17 must be from 0 to 16"):
        Cifar10DataSet("", "train", crop_padding=17)


def test_cutout_greys_one_clipped_square_and_leaves_the_crop_as_it_was():
    rng = np.random.RandomState(1)
    images = rng.randint(1, 127, size=(200, 32, 32, 3)).astype(np.uint8)  # never the fill value 128
    seed = tf.constant([5, 0], tf.int64)
    plain = distort(tf.constant(images), seed).numpy()
    cut = distort(tf.constant(images), seed, cutout=8).numpy()
    clipped = 0
    for i in range(200):
        grey = (cut[i] == CUTOUT_FILL).all(axis=2)
        rows, cols = np.flatnonzero(grey.any(axis=1)), np.flatnonzero(grey.any(axis=0))
        # One axis-aligned block, 8 wide unless a border clips it, and the rest is the plain crop.
        assert grey.sum() == len(rows) * len(cols) and grey[np.ix_(rows, cols)].all()
        assert 4 <= len(rows) <= 8 and 4 <= len(cols) <= 8
        assert len(rows) == 8 or rows[0] == 0 or rows[-1] == 31
        clipped += len(rows) < 8 or len(cols) < 8
        np.testing.assert_array_equal(cut[i][~grey], plain[i][~grey])
    assert 0 < clipped < 200  # centres reach the borders, but not always
    with pytest.raises(ValueError, match="cutout 33 must be a square side from 0 to 32"):
        Cifar10DataSet("", "train", cutout=33)


def test_seed_fixes_order_and_distortion(small):
    data_dir, _ = small

    def first(seed):
        it = iter(Cifar10DataSet(data_dir, "train", seed=seed).dataset(5))
        return np.concatenate([next(it)[0].numpy() for _ in range(3)])

    np.testing.assert_array_equal(first(11), first(11))
    assert not np.array_equal(first(11), first(12))


def test_counts_come_from_the_files_not_the_meta(small, mini_records):
    data_dir, _ = small
    ds = Cifar10DataSet(data_dir, "train")
    assert [ds.num_examples_per_epoch(s) for s in fmt.SUBSETS] == [14, 6, 7]
    # The shared archive's batches.meta says 10,000 per batch; each holds 1,017.
    mini = Cifar10DataSet(mini_records, "eval")
    assert [mini.num_examples_per_epoch(s) for s in fmt.SUBSETS] == [4068, 1017, 1017]


def test_records_of_the_original_tool_without_manifest(small, tmp_path):
    data_dir, _ = small
    for subset in fmt.SUBSETS:
        name = fmt.record_filename(subset)
        os.symlink(os.path.join(data_dir, name), str(tmp_path / name))
    assert Cifar10DataSet(str(tmp_path), "train").num_examples_per_epoch() == 14


def test_records_without_manifest_are_counted_by_their_framing_and_truncation_is_named(small, tmp_path):
    data_dir, _ = small
    for subset in fmt.SUBSETS:
        name = fmt.record_filename(subset)
        with open(os.path.join(data_dir, name), "rb") as f:
            data = f.read()
        # The validation file loses the last byte of its last record's checksum.
        with open(str(tmp_path / name), "wb") as f:
            f.write(data[:-1] if subset == fmt.VALIDATION else data)
    ds = Cifar10DataSet(str(tmp_path), "eval")
    assert [ds.num_examples_per_epoch(s) for s in (fmt.TRAIN, fmt.TEST)] == [14, 7]
    with pytest.raises(CorruptDataError, match=r"validation.tfrecords ends inside record 6: the file is truncated"):
        ds.num_examples_per_epoch(fmt.VALIDATION)


@pytest.mark.parametrize("make_dir", [lambda p: str(p / "nope"), lambda p: str(p), lambda p: ""])
def test_missing_or_empty_data_dir_says_run_the_converter(tmp_path, make_dir):
    with pytest.raises(MissingDataError, match=r"Run generate_cifar10_tfrecords.py --data-dir=.* first"):
        Cifar10DataSet(make_dir(tmp_path), "train")


def test_bad_subset_and_batch(small):
    with pytest.raises(ValueError, match="Unknown subset 'test'"):
        Cifar10DataSet(small[0], "test")
    with pytest.raises(ValueError, match="batch_size must be positive"):
        Cifar10DataSet(small[0], "eval").dataset(0)
