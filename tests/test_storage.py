"""Cloud Storage I/O against a real gcp-storage-emulator process on loopback."""

import json
import os

import pytest
import tensorflow as tf

from estimator.common import storage
from estimator.data import records as fmt
from estimator.data.convert import ConversionError, convert
from tests import cifar_archives as ca
from tests.helpers import gcs_names


def test_text_round_trip_and_remove(gcs):
    storage.write_text(gcs + "/dir/a.json", '{"x": 1}')
    storage.write_text(gcs + "/dir/sub/b.json", "{}")
    assert storage.read_text(gcs + "/dir/a.json") == '{"x": 1}'
    assert storage.exists(gcs + "/dir/a.json") and not storage.exists(gcs + "/dir/zz")
    assert storage.size(gcs + "/dir/a.json") == 8 and storage.size(gcs + "/dir/zz") is None
    storage.remove(gcs + "/dir/a.json")
    assert not storage.exists(gcs + "/dir/a.json") and storage.exists(gcs + "/dir/sub/b.json")


def test_local_writes_are_atomic_and_leave_no_temporaries(tmp_path):
    path = str(tmp_path / "d" / "f.txt")
    storage.write_text(path, "one")
    storage.write_text(path, "two")
    assert open(path).read() == "two" and os.listdir(str(tmp_path / "d")) == ["f.txt"]
    assert oct(os.stat(path).st_mode & 0o777) != oct(0o600)


def test_bad_gcs_paths():
    with pytest.raises(ValueError, match="names no bucket"):
        storage.split_gcs("gs:///x")
    assert storage.split_gcs("gs://b/a/c") == ("b", "a/c")


def test_convert_to_gcs_uploads_verified_records(gcs, tmp_path):
    sha, batches = ca.make_archive(str(tmp_path / "a.tar.gz"), sizes=(2, 3, 1, 2, 4, 5))
    data_dir = gcs + "/cifar"
    manifest = convert(data_dir, source=str(tmp_path / "a.tar.gz"), sha256=sha, progress=False, log=lambda *_: None)
    assert gcs_names(data_dir) == sorted(
        [fmt.MANIFEST_NAME, "eval.tfrecords", "train.tfrecords", "validation.tfrecords"]
    )
    assert json.loads(storage.read_text(data_dir + "/" + fmt.MANIFEST_NAME)) == manifest
    local = str(tmp_path / "eval.tfrecords")
    with open(local, "wb") as f:
        f.write(storage.read_bytes(data_dir + "/eval.tfrecords"))
    got = [tf.io.parse_single_example(r, fmt.feature_spec()) for r in tf.data.TFRecordDataset(local)]
    assert [int(g["label"]) for g in got] == batches["test_batch"][b"labels"]
    assert [g["image"].numpy() for g in got] == [r.tobytes() for r in batches["test_batch"][b"data"]]

    # A second run finds the complete records and uploads nothing.
    blob = storage._client().bucket(gcs[5:]).get_blob("cifar/train.tfrecords")
    lines = []
    convert(data_dir, source=str(tmp_path / "missing.tar.gz"), progress=False, log=lines.append)
    assert "nothing to do" in lines[0]
    again = storage._client().bucket(gcs[5:]).get_blob("cifar/train.tfrecords")
    assert again.generation == blob.generation


def test_failed_convert_leaves_nothing_in_the_bucket(gcs, tmp_path):
    ca.make_archive(str(tmp_path / "a.tar.gz"))
    with pytest.raises(ConversionError):
        convert(gcs + "/cifar", source=str(tmp_path / "a.tar.gz"), md5="0" * 32, progress=False, log=lambda *_: None)
    assert gcs_names(gcs + "/cifar") == []
