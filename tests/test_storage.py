"""Cloud Storage I/O against a real gcp-storage-emulator process on loopback."""

import importlib.metadata
import json
import os
import re
import time

import pytest
import tensorflow as tf

from estimator.common import storage
from estimator.data import records as fmt
from estimator.data.convert import ConversionError, convert
from tests import cifar_archives as ca
from tests import cloud_storage
from tests.helpers import MINI_SHA256, fetch_json, gcs_names, predict_records, run_job, run_joined, tensorboard


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


@pytest.mark.slow
@pytest.mark.skipif(
    int(importlib.metadata.version("gcp-storage-emulator").split(".")[0]) < 2026,
    reason="gcp-storage-emulator 2024.8.3, the last for Python 3.9, cannot store an object whose name ends in '/' "
    "(its in-memory file system wants a file name), which TensorFlow writes for every directory it makes",
)
def test_a_job_on_cloud_storage_through_tensorflows_own_client(gcs, mini_archive, tmp_path):
    """The docs' cloud path with every path on gs://, as a Vertex AI job has it: the converter writes the
    records to the bucket; the trainer reads them and writes its checkpoints, summaries and exports through
    TensorFlow's own client and its records (hparams.json, results.json) through google-cloud-storage; the
    same command resumes from the bucket; TensorBoard and predict read it there."""
    data, job = gcs + "/cifar-10-data", gcs + "/jobs/j1"
    rc, out = run_joined(
        "generate_cifar10_tfrecords", "--data-dir", data, "--source", mini_archive, "--sha256", MINI_SHA256
    )
    assert rc == 0, out
    assert gcs_names(data) == ["cifar10_manifest.json", "eval.tfrecords", "train.tfrecords", "validation.tfrecords"]
    flags = "--num-gpus 0 --num-layers 8 --train-batch-size 32 --eval-batch-size 100 --log-every-n-steps 10 --seed 2"
    # TensorFlow writes each event file on gs:// as a local copy in TMPDIR until it is closed: none is left.
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    rc, log = run_job(data, job, "--train-steps", "20", *flags.split(), env={"TMPDIR": str(scratch)})
    assert rc == 0, log[-3000:]
    assert tf.io.gfile.exists(job + "/model.ckpt-20.index")
    assert os.listdir(scratch) == []

    rc, log = run_job(data, job, "--train-steps", "40", *flags.split(), env={"TMPDIR": str(scratch)})
    assert rc == 0, log[-3000:]
    assert os.listdir(scratch) == []
    assert [int(s) for s in re.findall(r"step (\d+)/40 \(\d+%\) \| ", log)] == [21, 31, 40]  # from the bucket's step 20
    results = json.loads(storage.read_text(job + "/results.json"))
    assert results["global_step"] == 40 and results["eval_examples"] == 1017
    assert json.loads(storage.read_text(job + "/hparams.json"))["hparams"]["train_steps"] == 40
    assert results["final_export"].startswith(job + "/export/final/")
    assert tf.io.gfile.exists(results["final_export"] + "/saved_model.pb")
    assert len([n for n in tf.io.gfile.listdir(job) if n.startswith("events.out.tfevents.")]) == 2  # one a run
    # TensorFlow's client cannot append: it sends an event file whole at each flush, the last time at its close.
    for path in tf.io.gfile.glob(job + "/events.out.tfevents.*"):
        sent = [size for _, size in cloud_storage.uploads(cloud_storage.serving_directory(), path[len("gs://") :])]
        assert sent[-1] == tf.io.gfile.stat(path).length and sent == sorted(sent), sent

    rc, out, err = predict_records(job, data, tmp_path)
    assert rc == 0, err
    scored = json.loads(out)
    assert scored["examples"] == 1017 and round(scored["accuracy"] * 1017) == round(results["accuracy"] * 1017)

    with tensorboard(job) as base:
        # TensorBoard loads the runs one by one: wait until its reload has read the last evaluation's picture
        # as well as the test run's scalars (then the checks below read what it loaded).
        pictures_url = base + "images/images?run=eval_validation&tag=pictures/confusion_matrix"
        deadline, scalars, pictures = time.time() + 60, {}, []
        while time.time() < deadline and ("accuracy" not in scalars.get("eval_test", {}) or len(pictures) < 2):
            try:
                scalars = fetch_json(base + "scalars/tags")
                pictures = fetch_json(pictures_url)
            except OSError:
                pass
            time.sleep(1)
        assert "accuracy" in scalars["eval_test"] and "loss" in scalars["."], scalars
        loss = fetch_json(base + "scalars/scalars?tag=loss&run=.")
        assert [step for _, step, _ in loss] == [1, 11, 21, 31]  # every 10 steps: the first run to 20, the second on
        # Written without a flush on gs:// (each would upload the whole file again): the writer's own flush at the
        # end of training uploads the training's, the close at the job's end the pictures after the last evaluation.
        health = fetch_json(base + "scalars/scalars?tag=health/gradient_norm&run=.")
        assert [step for _, step, _ in health] == [0, 20]  # the fresh start, the resumed one
        assert [picture["step"] for picture in pictures] == [20, 40]  # each run's last validation


def test_the_front_answers_503_when_the_emulator_does_not_answer(tmp_path, capfd, monkeypatch):
    """A request the emulator drops reaches TensorFlow's client as a 503, which it retries, not as an empty
    reply; the cause is written for server.log."""
    import http.client
    import socket
    import ssl
    import threading

    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers: the front's timeout ends the wait
    front = cloud_storage.TlsFront(silent.getsockname()[1], str(tmp_path / "ca.pem"), str(tmp_path / "ledger"))
    threading.Thread(target=front.serve_forever, daemon=True).start()
    monkeypatch.setattr(cloud_storage, "EMULATOR_TIMEOUT", 0.5)
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        conn = http.client.HTTPSConnection("127.0.0.1", front.port, context=context, timeout=10)
        conn.set_tunnel("storage.googleapis.com", 443)
        for _ in range(2):  # the connection stays usable after a failure
            conn.request("GET", "/bucket/object")
            response = conn.getresponse()
            assert (response.status, response.read()) == (503, b"")
    finally:
        silent.close()
    assert capfd.readouterr().err.count("front: GET /bucket/object: ") == 2  # a timeout, named by its Python
