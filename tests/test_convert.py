"""The converter: exact round trips, accepted pickle styles, refused bad input."""

import glob
import json
import os
import pickle
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import tensorflow as tf

from estimator.data import records as fmt
from estimator.data.convert import ConversionError, convert, load_batch, read_archive
from tests import cifar_archives as ca
from tests.helpers import REPO


def quiet(*_):
    pass


def read_records(path):
    """All (image bytes, label) of a TFRecord file, in order, parsed with the format's spec."""
    out = []
    for raw in tf.data.TFRecordDataset(path):
        ex = tf.io.parse_single_example(raw, fmt.feature_spec())
        out.append((ex[fmt.IMAGE_KEY].numpy(), int(ex[fmt.LABEL_KEY])))
    return out


def expected_split(batches, subset):
    pairs = []
    for name in fmt.SPLITS[subset]:
        for row, label in zip(batches[name][b"data"], batches[name][b"labels"]):
            pairs.append((row.tobytes(), label))
    return pairs


def assert_nothing_written(data_dir):
    left = [p for p in glob.glob(os.path.join(data_dir, "**", "*"), recursive=True)]
    left += glob.glob(os.path.join(data_dir, ".*"))
    assert left == [], left


def test_round_trip_exact_pixels_and_labels(tmp_path):
    sha, batches = ca.make_archive(str(tmp_path / "a.tar.gz"), sizes=(3, 2, 4, 1, 5, 3))
    out = str(tmp_path / "out")
    manifest = convert(out, source=str(tmp_path / "a.tar.gz"), sha256=sha, progress=False, log=quiet)
    assert sorted(os.listdir(out)) == sorted(
        ["train.tfrecords", "validation.tfrecords", "eval.tfrecords", fmt.MANIFEST_NAME]
    )
    for subset, count in (("train", 10), ("validation", 5), ("eval", 3)):
        got = read_records(os.path.join(out, fmt.record_filename(subset)))
        assert got == expected_split(batches, subset)
        entry = manifest["files"][fmt.record_filename(subset)]
        assert entry["examples"] == count
        assert entry["bytes"] == os.path.getsize(os.path.join(out, fmt.record_filename(subset)))
    assert manifest["source"]["verified_sha256"] == sha
    on_disk = json.load(open(os.path.join(out, fmt.MANIFEST_NAME)))
    assert on_disk == manifest


@pytest.mark.parametrize("style", ca.STYLES)
def test_accepts_every_official_pickle_structure(style):
    batch = ca.make_batch(4, seed=7)
    data, labels = load_batch(ca.dump(batch, style), "b")
    np.testing.assert_array_equal(data, batch[b"data"])
    assert labels.tolist() == batch[b"labels"]


def test_python2_style_really_writes_python2_strings():
    # The emulation must produce what Python 2 wrote: no _codecs, BINSTRING opcodes.
    raw = ca.dump(ca.make_batch(2, seed=1), "py2")
    assert b"_codecs" not in raw and b"numpy.core.multiarray\n_reconstruct" in raw
    assert b"numpy._core" in ca.dump(ca.make_batch(2, seed=1), "np2-p2")


def test_accepts_str_keys_from_a_latin1_repickle():
    batch = {k.decode(): v for k, v in ca.make_batch(3, seed=2).items()}
    data, _ = load_batch(pickle.dumps(batch, protocol=4), "b")
    assert data.shape == (3, 3072)


def test_real_python2_batches_of_the_shared_archive(mini_archive):
    batches = read_archive(mini_archive)
    assert {n: len(b[1]) for n, b in batches.items()} == {n: 1017 for n in ca.BATCH_NAMES}
    # The first image of data_batch_1 of the official CIFAR-10 is a frog (6).
    assert batches["data_batch_1"][1][:5].tolist() == [6, 9, 9, 4, 1]


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch %s" % self.marker,))


@pytest.mark.parametrize(
    "payload",
    [
        lambda m: Evil(m),
        lambda m: ca._numpy_attr("_frombuffer", "numpy.core.numeric"),  # allowed name, but as a value
    ],
)
def test_hostile_pickle_runs_nothing_and_writes_nothing(tmp_path, payload):
    marker = tmp_path / "pwned"
    batches = {n: ca.make_batch(2, seed=i) for i, n in enumerate(ca.BATCH_NAMES)}
    batches["data_batch_3"][b"batch_label"] = payload(str(marker))
    path = str(tmp_path / "evil.tar.gz")
    sha = ca.write_tar(path, ca.official_members(batches, "py3-p2"))
    out = tmp_path / "out"
    with pytest.raises(ConversionError) as e:
        convert(str(out), source=path, sha256=sha, progress=False, log=quiet)
    assert "data_batch_3" in str(e.value)
    assert not marker.exists()
    assert_nothing_written(str(out))


def test_refuses_codecs_other_than_latin1(tmp_path):
    import codecs

    class Sneaky:
        def __reduce__(self):
            return (codecs.encode, ("x", "rot13"))

    raw = pickle.dumps({b"data": Sneaky()}, protocol=2)
    with pytest.raises(ConversionError, match="rot13"):
        load_batch(raw, "b")


def test_refuses_array_subclasses():
    raw = pickle.dumps({b"data": np.ma.masked_array(np.zeros((1, 3072), np.uint8)), b"labels": [1]}, protocol=2)
    with pytest.raises(ConversionError, match="numpy.ma"):
        load_batch(raw, "b")


@pytest.mark.parametrize(
    "batch,message",
    [
        ({b"data": np.zeros((2, 3071), np.uint8), b"labels": [0, 1]}, "3071 bytes"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}, "label 10 at row 1"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [-1, 0]}, "label -1 at row 0"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, "1 labels for 2 images"),
        ({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}, "uint8"),
        ({b"labels": [0, 1]}, "no 'data'"),
        ([1, 2], "not a dict"),
    ],
)
def test_refuses_malformed_batches(batch, message):
    with pytest.raises(ConversionError, match=message):
        load_batch(ca.dump(batch, "py2"), "somefile")


def _archive_with(tmp_path, extra):
    batches = {n: ca.make_batch(2, seed=i) for i, n in enumerate(ca.BATCH_NAMES)}
    path = str(tmp_path / "bad.tar.gz")
    sha = ca.write_tar(path, ca.official_members(batches) + extra)
    return path, sha


def _link(name, target, kind):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def _device(name):
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    info.devmajor, info.devminor = 1, 3
    return info, None


@pytest.mark.parametrize(
    "extra,message",
    [
        ([ca.file_member("../escape", b"x")], "unsafe path"),
        ([ca.file_member("/etc/cron.d/x", b"x")], "unsafe path"),
        ([ca.file_member("cifar-10-batches-py/../../x", b"x")], "unsafe path"),
        ([ca.file_member("elsewhere/file", b"x")], "outside cifar-10-batches-py"),
        ([_link("cifar-10-batches-py/link", "/etc/passwd", tarfile.SYMTYPE)], "symbolic link"),
        ([_link("cifar-10-batches-py/hard", "cifar-10-batches-py/data_batch_1", tarfile.LNKTYPE)], "hard link"),
        ([_device("cifar-10-batches-py/null")], "device"),
    ],
)
def test_refuses_unsafe_archive_members(tmp_path, extra, message):
    path, sha = _archive_with(tmp_path, extra)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=message) as e:
        convert(str(out), source=path, sha256=sha, progress=False, log=quiet)
    assert path in str(e.value)
    assert_nothing_written(str(out))
    assert not (tmp_path / "escape").exists()


def test_refuses_missing_batch(tmp_path):
    batches = {n: ca.make_batch(2, seed=i) for i, n in enumerate(ca.BATCH_NAMES) if n != "data_batch_4"}
    path = str(tmp_path / "a.tar.gz")
    sha = ca.write_tar(path, ca.official_members(batches))
    with pytest.raises(ConversionError, match="no cifar-10-batches-py/data_batch_4"):
        convert(str(tmp_path / "out"), source=path, sha256=sha, progress=False, log=quiet)
    assert_nothing_written(str(tmp_path / "out"))


def test_refuses_truncated_archive(tmp_path):
    ca.make_archive(str(tmp_path / "a.tar.gz"), sizes=(50,) * 6)
    raw = (tmp_path / "a.tar.gz").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(raw[: len(raw) * 2 // 3])
    with pytest.raises(ConversionError, match="truncated"):
        convert(str(tmp_path / "out"), source=str(tmp_path / "cut.tar.gz"), progress=False, log=quiet)
    assert_nothing_written(str(tmp_path / "out"))


def test_refuses_checksum_mismatch(tmp_path):
    sha, _ = ca.make_archive(str(tmp_path / "a.tar.gz"))
    wrong = "0" * 64
    with pytest.raises(ConversionError, match="Checksum mismatch .* expected 0000"):
        convert(str(tmp_path / "out"), source=str(tmp_path / "a.tar.gz"), sha256=wrong, progress=False, log=quiet)
    assert_nothing_written(str(tmp_path / "out"))
    with pytest.raises(ConversionError, match="not a 32-digit hex"):
        convert(str(tmp_path / "out"), source=str(tmp_path / "a.tar.gz"), md5="xyz", progress=False, log=quiet)


def test_second_run_does_nothing_unless_overwrite(tmp_path):
    sha, _ = ca.make_archive(str(tmp_path / "a.tar.gz"))
    out = str(tmp_path / "out")
    convert(out, source=str(tmp_path / "a.tar.gz"), sha256=sha, progress=False, log=quiet)
    stamps = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)}
    lines = []
    # A missing source proves nothing is even fetched.
    convert(out, source=str(tmp_path / "gone.tar.gz"), progress=False, log=lines.append)
    assert "nothing to do" in lines[0]
    assert {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)} == stamps
    # A different archive with --overwrite replaces everything.
    sha2, batches2 = ca.make_archive(str(tmp_path / "b.tar.gz"), sizes=(1, 1, 1, 1, 2, 7))
    m = convert(out, source=str(tmp_path / "b.tar.gz"), sha256=sha2, overwrite=True, progress=False, log=quiet)
    assert m["files"]["eval.tfrecords"]["examples"] == 7
    assert read_records(os.path.join(out, "eval.tfrecords")) == expected_split(batches2, "eval")


def test_incomplete_outputs_are_rebuilt(tmp_path):
    sha, _ = ca.make_archive(str(tmp_path / "a.tar.gz"))
    out = str(tmp_path / "out")
    convert(out, source=str(tmp_path / "a.tar.gz"), sha256=sha, progress=False, log=quiet)
    with open(os.path.join(out, "train.tfrecords"), "ab") as f:
        f.write(b"junk")
    lines = []
    convert(out, source=str(tmp_path / "a.tar.gz"), sha256=sha, progress=False, log=lines.append)
    assert not any("nothing to do" in line for line in lines)
    assert len(read_records(os.path.join(out, "train.tfrecords"))) == 10


def test_cli_refuses_with_message_and_exit_code(tmp_path):
    sha, _ = ca.make_archive(str(tmp_path / "a.tar.gz"))
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        os.path.join(REPO, "generate_cifar10_tfrecords.py"),
        "--data-dir",
        str(out),
        "--source",
        str(tmp_path / "a.tar.gz"),
        "--md5",
        "0" * 32,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1
    assert "error: Checksum mismatch for %s" % (tmp_path / "a.tar.gz") in proc.stderr
    assert not out.exists() or os.listdir(str(out)) == []
    cmd[-2:] = ["--sha256", sha]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(str(out)))[0] == fmt.MANIFEST_NAME
