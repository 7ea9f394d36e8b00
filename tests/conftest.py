"""Shared fixtures: small archives, the shared data sets, a storage emulator."""

import os
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.helpers import MINI_ARCHIVE, MINI_SHA256, free_port

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# As estimator/__init__.py does, for test modules that import TensorFlow before the package.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# The speed probes the trainer caches (precision, evaluation) go to a directory of this test
# session's own, not the user's ~/.cache; jobs the tests start inherit it.
os.environ.setdefault("CIFAR10_CACHE_DIR", tempfile.mkdtemp(prefix="cifar10-test-cache-"))


def pytest_collection_modifyitems(config, items):
    """``ONEDNN_MAX_CPU_ISA`` below AVX512_CORE_BF16 (``AVX2``: what an AVX2-only CPU does) leaves oneDNN no
    bf16 kernels, while TensorFlow 2.15, deciding from the CPU's flags, still asks for them and fails or
    aborts: tests that run bf16 kernels (``bf16_kernels``) cannot run there. On a real AVX2-only CPU they
    run (emulated), so they are skipped only under the variable."""
    from estimator.common import machine

    isa = machine.cpu_info()["isa"]
    if isa in machine.BF16_ISAS:
        return
    skip = pytest.mark.skip(reason="ONEDNN_MAX_CPU_ISA=%s: oneDNN has no bf16 kernels under it" % isa)
    for item in items:
        if "bf16_kernels" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def mini_archive():
    if not os.path.exists(MINI_ARCHIVE):
        pytest.fail(
            "The shared real-pixel archive %s is missing: CI clones the repo with ../shared beside it." % MINI_ARCHIVE
        )
    return MINI_ARCHIVE


@pytest.fixture(scope="session")
def mini_records(tmp_path_factory, mini_archive):
    """TFRecords of the shared real-pixel archive (4,068 / 1,017 / 1,017 images)."""
    from estimator.data.convert import convert

    data_dir = str(tmp_path_factory.mktemp("mini-records"))
    convert(data_dir, source=mini_archive, sha256=MINI_SHA256, progress=False, log=lambda *_: None)
    return data_dir


@pytest.fixture(scope="session")
def gcs_emulator():
    """A real gcp-storage-emulator process on loopback; yields its URL."""
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    proc = subprocess.Popen(
        [exe, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail("gcp-storage-emulator exited with %s" % proc.returncode)
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("gcp-storage-emulator did not listen on port %d" % port)
    try:
        yield "http://127.0.0.1:%d" % port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def gcs(gcs_emulator, monkeypatch):
    """The emulator as the package's Cloud Storage, with a fresh bucket; yields gs://bucket."""
    from estimator.common import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    storage._client_cache.clear()
    name = "test-bucket-%d" % int(time.time() * 1e6)
    storage._client().create_bucket(name)
    yield "gs://" + name
    storage._client_cache.clear()
