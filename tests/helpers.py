"""What several test modules use: paths, ports, small HParams, running the package's commands,
reading event files and validating against Google's discovery schemas."""

import contextlib
import gc
import glob
import json
import os
import socket
import subprocess
import sys
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.abspath(os.path.join(REPO, "..", "shared", "data"))
MINI_ARCHIVE = os.path.join(SHARED_DATA, "cifar-10-mini-python.tar.gz")
# A quarter-width airbench network on small batches: a real job of a few seconds.
SMALL_AIRBENCH = (
    "--num-gpus 0 --network airbench --width-multiplier 0.25 --train-batch-size 32 --eval-batch-size 339".split()
)
MINI_SHA256 = "725b7c7a07002b7a8100aa0f84e2b2a528c9ab7e03d55ab240a67e44aff60726"


def _discovery_schemas(api):
    """The schemas of one of Google's discovery documents, as google-api-python-client ships them."""
    import googleapiclient

    documents = os.path.join(os.path.dirname(googleapiclient.__file__), "discovery_cache", "documents")
    with open(os.path.join(documents, api + ".json")) as f:
        return json.load(f)["schemas"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gcs_names(directory):
    """The names of the objects under a ``gs://`` directory (in the emulator), sorted: what a test checks
    was written, or left behind."""
    from estimator.common import storage

    bucket, prefix = storage.split_gcs(directory.rstrip("/") + "/")
    return sorted(blob.name[len(prefix) :] for blob in storage._client().list_blobs(bucket, prefix=prefix))


def hp(**kw):
    """A small CPU ResNet-8 ``HParams`` (batches of 6 split evenly over 1, 2 or 3 towers)."""
    from estimator.training.hparams import HParams

    base = dict(
        data_dir="unused",
        job_dir="unused",
        num_gpus=0,
        num_layers=8,
        train_batch_size=6,
        eval_batch_size=6,
        num_train_examples=4068,
        seed=1,
    )
    base.update(kw)
    return HParams(**base)


def run_module(module, *args, env=None, timeout=600):
    """``python -m MODULE ARGS`` from the repository; returns (exit code, stdout, stderr)."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-m", module] + list(args),
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr


def predict_records(job_dir, data_dir, tmp_path):
    """``python -m estimator.predict --json`` of the job's final export on DATA_DIR/eval.tfrecords (its
    confusion matrix under ``tmp_path``); returns (exit code, stdout, stderr)."""
    return run_module(
        "estimator.predict",
        "--model",
        os.path.join(job_dir, "export", "final"),
        "--records",
        os.path.join(data_dir, "eval.tfrecords"),
        "--json",
        "--confusion-matrix",
        str(tmp_path / "cm.png"),
    )


def run_joined(module, *args, env=None, timeout=600):
    """``run_module`` with stdout and stderr together: (exit code, output)."""
    code, out, err = run_module(module, *args, env=env, timeout=timeout)
    return code, out + err


def run_main(*flags, env=None, timeout=600):
    """The trainer's command; returns (exit code, stdout and stderr together)."""
    return run_joined("estimator.cifar10_main", *flags, env=env, timeout=timeout)


def fetch_json(url):
    """The JSON a local server (TensorBoard's plugin API) answers at URL."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read().decode())


@contextlib.contextmanager
def tensorboard(logdir):
    """A real ``tensorboard`` server on a free loopback port; yields its plugin API's base URL."""
    port = free_port()
    command = [os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--logdir", str(logdir)]
    server = subprocess.Popen(
        command + ["--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield "http://127.0.0.1:%d/data/plugin/" % port
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_job(data_dir, job_dir, *flags, env=None, timeout=600):
    """The trainer on ``data_dir`` into ``job_dir`` with ``flags``: (exit code, output)."""
    return run_main("--data-dir", data_dir, "--job-dir", str(job_dir), *flags, env=env, timeout=timeout)


def in_process(main, capsys, *argv):
    """``(exit code, stdout, stderr)`` of an entry point's ``main(argv)`` run in this process: the refusals
    need no interpreter of their own (each command's own subprocess test keeps its command line honest)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def train_here(capsys, data_dir, job_dir, *flags, rules=None):
    """``run_job`` as the trainer's ``main`` in this process, for a job whose subject is what it trains, records
    and refuses: no interpreter or TensorFlow start of its own (a job's process, its start-up, signals and exit
    are the subject of ``run_job``'s tests). ``rules``: health-rule thresholds to change for this job only
    ({"LOSS_WINDOW": 100})."""
    import logging
    from unittest import mock

    import tensorflow as tf

    from estimator import cifar10_main
    from estimator.health import rules as rules_lib

    argv = ["--data-dir", data_dir, "--job-dir", str(job_dir), *flags]
    # The job's log lines to this test's stderr, as TensorFlow's own handler writes them in a process of its own.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    tf.get_logger().addHandler(handler)
    # The worker's objects frozen meanwhile, as the trainer freezes its imports (processes.imports_uncollected):
    # else each of the job's collections walks every earlier test's graphs too.
    gc.freeze()
    try:
        with mock.patch.multiple(rules_lib, **rules) if rules else contextlib.nullcontext():
            code, out, err = in_process(cifar10_main.main, capsys, *argv)
    finally:
        gc.unfreeze()
        tf.get_logger().removeHandler(handler)
    return code, out + err


def events(directory):
    """tag -> [(step, value)] from the event files of one TensorBoard run directory."""
    import tensorflow as tf

    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalar = value.simple_value if value.HasField("simple_value") else None
                out.setdefault(value.tag, []).append((event.step, scalar))
    return out


ML_SCHEMAS = _discovery_schemas("ml.v1")
AIPLATFORM_SCHEMAS = _discovery_schemas("aiplatform.v1")


def google_type_errors(config: dict) -> list:
    """[] when Google's own Vertex AI types (the client library's ``aiplatform_v1``) take CONFIG as gcloud
    sends it: a ``HyperparameterTuningJob`` (with a ``trialJobSpec``) or a ``CustomJobSpec``; else the parse
    error (an unknown field, a bad enum value or a wrong type)."""
    from google.cloud.aiplatform_v1 import types
    from google.protobuf import json_format

    kind = types.HyperparameterTuningJob if "trialJobSpec" in config else types.CustomJobSpec
    try:
        json_format.ParseDict(config, kind.pb(kind()))
    except json_format.ParseError as e:
        return [str(e)]
    return []


def check(value, schema, path="", errors=None, schemas=ML_SCHEMAS):
    """Validates ``value`` against a discovery-document schema; returns the errors.

    Read-only fields (output only) count as unknown: a request must not set them.
    """
    errors = [] if errors is None else errors
    if "$ref" in schema:
        schema = schemas[schema["$ref"]]
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            errors.append("%s: expected an object, got %r" % (path, value))
            return errors
        for key, item in value.items():
            if key in schema.get("properties", {}) and not schema["properties"][key].get("readOnly"):
                check(item, schema["properties"][key], path + "." + key, errors, schemas)
            elif "additionalProperties" in schema:
                check(item, schema["additionalProperties"], path + "." + key, errors, schemas)
            else:
                errors.append("%s: unknown field %r" % (path, key))
    elif kind == "array":
        if not isinstance(value, list):
            errors.append("%s: expected a list" % path)
        else:
            for i, item in enumerate(value):
                check(item, schema["items"], "%s[%d]" % (path, i), errors, schemas)
    elif kind == "string" and schema.get("format") in ("int64", "uint64"):
        # JSON carries 64-bit integers as strings; YAML configs give numbers.
        if isinstance(value, bool) or not (isinstance(value, int) or str(value).lstrip("-").isdigit()):
            errors.append("%s: expected an integer, got %r" % (path, value))
    elif kind == "string":
        if not isinstance(value, str):
            errors.append("%s: expected a string, got %r" % (path, value))
        elif "enum" in schema and value not in schema["enum"]:
            errors.append("%s: %r is not one of %s" % (path, value, schema["enum"]))
    elif kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        errors.append("%s: expected an integer, got %r" % (path, value))
    elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        errors.append("%s: expected a number, got %r" % (path, value))
    elif kind == "boolean" and not isinstance(value, bool):
        errors.append("%s: expected a boolean, got %r" % (path, value))
    return errors
