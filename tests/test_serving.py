"""SavedModel exports during and after training, their signatures, and the predict command."""

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from estimator.data.pipeline import Cifar10DataSet
from estimator.training import config
from estimator.training.hparams import HParams
from estimator.training.model_fn import model_fn
from tests.helpers import REPO, events, in_process, predict_records, run_job, run_module, train_here

# One worker runs this module (make test: --dist loadgroup), so its finished job is trained once, not once a worker.
pytestmark = pytest.mark.xdist_group("serving")

FLAGS = (
    "--num-gpus 0 --num-layers 8 --train-batch-size 32 --eval-batch-size 100 "
    "--save-checkpoints-steps 20 --eval-throttle-secs 0 --batch-norm-decay 0.9 "
    "--log-every-n-steps 20 --seed 4"
).split()


def exports(job, kind):
    return sorted(glob.glob(os.path.join(job, "export", kind, "[0-9]*")))


@pytest.fixture(scope="module")
def job(tmp_path_factory, mini_records):
    """ResNet-8 trained 60 steps, evaluated (and maybe exported) at steps 20, 40 and 60."""
    job = str(tmp_path_factory.mktemp("serving") / "job")
    rc, log = run_job(mini_records, job, "--train-steps", "60", *FLAGS)
    assert rc == 0, log[-3000:]
    return job


@pytest.mark.slow
def test_the_tta_fraction_benchmark_evaluates_a_finished_job_at_each_fraction(job, tmp_path):
    from benchmarks import tta_fraction

    copy, out = str(tmp_path / "job"), str(tmp_path / "tta.json")
    shutil.copytree(job, copy)  # its evaluations write events: the module's job stays as trained
    assert tta_fraction.main(["--job-dir", copy, "--fractions", "1", "0.25", "--repeats", "1", "--out", out]) == 0
    rows = json.load(open(out))["rows"]
    assert [r["fraction"] for r in rows] == [1.0, 0.25] and {r["images"] for r in rows} == {1017}
    assert rows[0]["accuracy"] == rows[1]["accuracy"]  # the plain view is the same model's
    for r in rows:
        assert 0 <= min(r["accuracy_flip_tta"], r["accuracy_tta"]) <= 1 and r["eval_secs"] > 0


@pytest.mark.slow
def test_best_and_final_exports(job):
    final, best = exports(job, "final"), exports(job, "best")
    assert len(final) == 1 and 1 <= len(best) <= 3
    for path in final + best:
        assert os.path.isfile(os.path.join(path, "saved_model.pb"))
        assert os.path.isfile(os.path.join(path, "variables", "variables.index"))
    assert not glob.glob(os.path.join(job, "export", "*", "*.tmp-*"))
    # The best export is the evaluation with the highest validation accuracy.
    evaluated = dict(events(os.path.join(job, "eval_validation"))["accuracy"])
    record = json.load(open(os.path.join(job, "export", "best", "best_eval.json")))
    best_step = max(evaluated, key=lambda s: (evaluated[s], -s))
    assert record["global_step"] == best_step and record["accuracy"] == pytest.approx(evaluated[best_step])
    assert record["checkpoint"].endswith("model.ckpt-%d" % best_step) and record["export"] == best[-1]


@pytest.mark.slow
def test_saved_model_cli_shows_both_signatures(job):
    out = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "saved_model_cli"),
            "show",
            "--dir",
            exports(job, "final")[0],
            "--all",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    default = out[out.index("signature_def['serving_default']") :]
    assert "inputs['image_bytes'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in default
    images = out[out.index("signature_def['images']") : out.index("signature_def['serving_default']")]
    assert "inputs['images'] tensor_info:\n        dtype: DT_FLOAT\n        shape: (-1, 32, 32, 3)" in images
    for block in (default, images):
        assert "outputs['classes']" in block and "DT_INT32" in block
        assert "outputs['class_names']" in block and "DT_STRING" in block
        assert "outputs['probabilities']" in block and "shape: (-1, 10)" in block


LOAD_SCRIPT = """
import json, sys, numpy as np, tensorflow as tf
loaded = tf.saved_model.load(sys.argv[1])
pngs = [open(p, "rb").read() for p in sys.argv[3:]]
by_bytes = loaded.signatures["serving_default"](image_bytes=tf.constant(pngs))
by_images = loaded.signatures["images"](images=tf.constant(np.load(sys.argv[2])))
print(json.dumps({"bytes": by_bytes["probabilities"].numpy().tolist(),
                  "images": by_images["probabilities"].numpy().tolist(),
                  "names": [n.decode() for n in by_bytes["class_names"].numpy()]}))
"""


@pytest.mark.slow
def test_signatures_match_estimator_predict_in_a_fresh_process(job, mini_records, tmp_path):
    # Known pixels: the first 7 test images, written as PNG (lossless) and as .npy.
    images, _ = next(iter(Cifar10DataSet(mini_records, "eval").dataset(7)))
    pixels = images.numpy()
    pngs = []
    for i, image in enumerate(pixels):
        path = str(tmp_path / ("img%d.png" % i))
        tf.io.write_file(path, tf.io.encode_png(tf.cast(image, tf.uint8)))
        pngs.append(path)
    np.save(str(tmp_path / "images.npy"), pixels)
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, exports(job, "final")[0], str(tmp_path / "images.npy")] + pngs,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    served = json.loads(proc.stdout)

    hp = config.load(job)
    estimator = tf.estimator.Estimator(model_fn, model_dir=job, params=hp)
    predicted = list(
        estimator.predict(
            lambda: tf.data.Dataset.from_tensors(tf.constant(pixels)), checkpoint_path=tf.train.latest_checkpoint(job)
        )
    )
    want = np.array([p["probabilities"] for p in predicted])
    np.testing.assert_allclose(served["bytes"], want, atol=1e-5)
    np.testing.assert_allclose(served["images"], want, atol=1e-5)
    assert served["names"] == [p["class_names"].decode() for p in predicted]


@pytest.mark.slow
def test_predict_records_reproduces_the_evaluation_accuracy(job, mini_records, tmp_path):
    rc, out, err = predict_records(job, mini_records, tmp_path)
    assert rc == 0, err
    scored = json.loads(out)
    results = json.load(open(os.path.join(job, "results.json")))
    assert scored["examples"] == results["eval_examples"] == 1017
    # The same images right: the Estimator's metric is float32, so compare counts.
    assert round(scored["accuracy"] * 1017) == round(results["accuracy"] * 1017)
    assert scored["accuracy"] == pytest.approx(results["accuracy"], abs=1e-7)
    assert open(str(tmp_path / "cm.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_predict_files_top_k_json_and_conversions(job, mini_records, tmp_path):
    images, _ = next(iter(Cifar10DataSet(mini_records, "eval").dataset(2)))
    rgb = str(tmp_path / "a.png")
    tf.io.write_file(rgb, tf.io.encode_png(tf.cast(images[0], tf.uint8)))
    gray = str(tmp_path / "gray.png")
    tf.io.write_file(gray, tf.io.encode_png(tf.cast(tf.image.rgb_to_grayscale(images[1]), tf.uint8)))
    big = str(tmp_path / "big.jpg")
    tf.io.write_file(big, tf.io.encode_jpeg(tf.cast(tf.image.resize(images[0], [64, 48]), tf.uint8)))
    np.save(str(tmp_path / "two.npy"), images.numpy())
    model = os.path.join(job, "export", "best")

    rc, out, err = run_module("estimator.predict", "--model", model, rgb, gray, gray, big, "--top-k", "2")
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith(rgb + ": ") and lines[0].count(",") == 1
    assert err.count("grayscale images were converted to RGB") == 1  # said once
    assert "resized to 32x32" in err

    rc, out, err = run_module("estimator.predict", "--model", model, str(tmp_path / "two.npy"), rgb, "--json")
    assert rc == 0, err
    rows = [json.loads(line) for line in out.strip().splitlines()]
    assert [r["file"] for r in rows] == [rgb, str(tmp_path / "two.npy"), str(tmp_path / "two.npy")]
    assert [r.get("index") for r in rows] == [None, 0, 1]
    for r in rows:
        assert set(r) >= {"file", "class_id", "class", "probabilities"} and len(r["probabilities"]) == 10
        assert abs(sum(r["probabilities"]) - 1) < 1e-5 and r["class_id"] == int(np.argmax(r["probabilities"]))
    # The same image by bytes and by array: the same answer.
    np.testing.assert_allclose(rows[0]["probabilities"], rows[1]["probabilities"], atol=1e-5)

    rc, out, _ = run_module("estimator.predict", "--vertex-request", rgb)
    request = json.loads(out)
    instance = request["instances"][0]
    assert rc == 0 and list(instance) == ["image_bytes"] and "b64" in instance["image_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("content,message", [(b"", "is empty"), (b"not an image at all", "is not a PNG or JPEG image")])
def test_predict_refuses_bad_image_files(job, tmp_path, capsys, content, message):
    from estimator import predict

    bad = tmp_path / "bad.png"
    bad.write_bytes(content)
    rc, out, err = in_process(predict.main, capsys, "--model", os.path.join(job, "export", "best"), str(bad))
    assert rc == 1 and message in err and str(bad) in err and "Traceback" not in err


def test_predict_refuses_a_directory_without_saved_model(tmp_path, capsys):
    from estimator import predict

    rc, _, err = in_process(predict.main, capsys, "--model", str(tmp_path), str(tmp_path / "x.png"))
    assert rc == 1 and "does not exist" in err
    png = tmp_path / "x.png"
    tf.io.write_file(str(png), tf.io.encode_png(tf.zeros([32, 32, 3], tf.uint8)))
    rc, _, err = in_process(predict.main, capsys, "--model", str(tmp_path), str(png))
    assert rc == 1 and "holds no SavedModel" in err and str(tmp_path) in err


@pytest.mark.slow
def test_export_cli_and_its_refusals(job, tmp_path, capsys):
    from estimator import export

    out_dir = str(tmp_path / "model")
    rc, out, err = run_module(
        "estimator.export", "--job-dir", job, "--checkpoint", os.path.join(job, "model.ckpt-20"), "--output", out_dir
    )
    assert rc == 0, err
    assert os.path.isfile(os.path.join(out_dir, "saved_model.pb")) and "model.ckpt-20" in out
    rc, _, err = in_process(export.main, capsys, "--job-dir", job, "--output", out_dir)
    assert rc == 1 and "already exists" in err

    # A job whose hparams say ResNet-14, pointed at this ResNet-8's checkpoints.
    other = str(tmp_path / "other")
    shutil.copytree(job, other, ignore=shutil.ignore_patterns("export", "eval_*", "events.*"))
    described = json.load(open(os.path.join(other, "hparams.json")))
    described["hparams"]["num_layers"] = 14
    json.dump(described, open(os.path.join(other, "hparams.json"), "w"))
    target = str(tmp_path / "wrong")
    rc, _, err = in_process(export.main, capsys, "--job-dir", other, "--output", target)
    assert rc == 1 and "does not hold a ResNet-14 v1" in err and "--num-layers" in err
    assert not os.path.exists(target)
    assert not [n for n in os.listdir(str(tmp_path)) if ".tmp-" in n]

    rc, _, err = in_process(export.main, capsys, "--job-dir", str(tmp_path / "nothing"), "--output", target)
    assert rc == 1 and "hparams.json not found" in err


@pytest.mark.slow
def test_restarted_job_keeps_the_real_best(job, mini_records, tmp_path, capsys):
    # tensorflow/tensorflow#47396: BestExporter exports after a restart whatever the value.
    copy = str(tmp_path / "job")
    shutil.copytree(job, copy)
    record_path = os.path.join(copy, "export", "best", "best_eval.json")
    record = json.load(open(record_path))
    record["accuracy"] = 0.99  # a best this short run cannot beat
    json.dump(record, open(record_path, "w"))
    before = exports(copy, "best")
    rc, log = train_here(capsys, mini_records, copy, "--train-steps", "80", *FLAGS)
    assert rc == 0, log[-3000:]
    assert exports(copy, "best") == before and json.load(open(record_path))["accuracy"] == 0.99
    assert len(exports(copy, "final")) == 2  # the final model is exported again


def test_serving_hparams_are_one_float32_cpu_tower():
    from estimator.serving.signatures import serving_hparams

    hp = serving_hparams(
        HParams(
            data_dir="",
            job_dir="",
            num_gpus=2,
            variable_strategy="GPU",
            precision="bf16",
            data_format="channels_first",
            eval_flip_tta=True,
        )
    )
    assert (hp.num_gpus, hp.num_cpu_towers, hp.variable_strategy, hp.precision, hp.data_format, hp.eval_flip_tta) == (
        0,
        0,
        "CPU",
        "fp32",
        "channels_last",
        False,
    )


def test_a_best_export_of_a_checkpoint_gone_before_it_is_skipped(tmp_path):
    """An evaluator behind the chief (newer checkpoints replaced the one it evaluated) exports nothing, records
    nothing, and says so; the next evaluation's checkpoint may be exported."""
    from estimator.serving import exporters
    from tests.helpers import hp

    exporter = exporters.BestAccuracyExporter(hp(job_dir=str(tmp_path), network="airbench", width_multiplier=0.25))
    gone = str(tmp_path / "model.ckpt-50")
    assert exporter.export(None, None, gone, {"accuracy": 0.5, "global_step": 50}, False) is None
    assert exporter.best() is None and not glob.glob(str(tmp_path / "export" / "best" / "*"))
