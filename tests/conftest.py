"""Shared fixtures: small archives, the shared data sets, a storage emulator."""

import os
import tempfile
import time

import pytest

from tests.helpers import MINI_ARCHIVE, MINI_SHA256

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# As estimator/__init__.py does, for test modules that import TensorFlow before the package.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# make test runs three tests at once on two cores: one thread per op each, not two (their trainers and
# servers contend less: test_training.py and test_health.py 10% faster held to AVX2, in the commit that set it).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# No test writes outside its temporary directories: HOME, the caches and the speed probes' directory are
# this session's own, for the tests and every process they start (pytest-xdist's workers carry the real
# home on in REAL_HOME_VARIABLE); pyenv's shims still find their Pythons in the real home.
REAL_HOME_VARIABLE = "CIFAR10_TESTS_REAL_HOME"
os.environ.setdefault(REAL_HOME_VARIABLE, os.path.expanduser("~"))
REAL_HOME = os.environ[REAL_HOME_VARIABLE]
if os.path.isdir(os.path.join(REAL_HOME, ".pyenv")):
    os.environ.setdefault("PYENV_ROOT", os.path.join(REAL_HOME, ".pyenv"))
_SESSION = tempfile.mkdtemp(prefix="cifar10-tests-")
os.environ["HOME"] = os.path.join(_SESSION, "home")
os.environ["XDG_CACHE_HOME"] = os.path.join(_SESSION, "home", ".cache")
os.environ["MPLCONFIGDIR"] = os.path.join(_SESSION, "matplotlib")
os.environ["CIFAR10_CACHE_DIR"] = os.path.join(_SESSION, "probes")
os.makedirs(os.environ["HOME"])
# What the package would write in the real home (its cache), as it was when the session began.
REAL_CACHE = os.path.join(REAL_HOME, ".cache", "cifar10-resnet-estimator")


def _listing(directory):
    if not os.path.isdir(directory):
        return {}
    return {name: os.stat(os.path.join(directory, name)).st_mtime_ns for name in os.listdir(directory)}


_REAL_CACHE_BEFORE = _listing(REAL_CACHE)


def pytest_sessionfinish(session, exitstatus):
    """The suite fails if anything of it wrote the package's cache in the real home."""
    after = _listing(REAL_CACHE)
    if after != _REAL_CACHE_BEFORE:
        changed = sorted(n for n in set(after) | set(_REAL_CACHE_BEFORE) if after.get(n) != _REAL_CACHE_BEFORE.get(n))
        print(
            "\nerror: the tests wrote %s in the real home (%s): every path must be a temporary one"
            % (changed, REAL_CACHE)
        )
        session.exitstatus = 1


def pytest_configure(config):
    """One line and no run where ``--dist loadgroup`` (make test) would lose the tests' ``xdist_group``:
    pytest-xdist 3.8 puts a test's group in its id by setting ``Item._nodeid``, which pytest 9.2.0's ids ignore
    (it spread the serving tests over every worker, and each trained their job)."""
    if config.getoption("dist", "no") == "loadgroup" and "_nodeid" not in pytest.Item.nodeid.fget.__code__.co_names:
        raise pytest.UsageError(
            "pytest %s loses pytest-xdist's test groups (--dist loadgroup): install requirements-test.txt's pins"
            % pytest.__version__
        )


def pytest_collection_modifyitems(config, items):
    """The slow tests first; and the bf16 tests skipped where oneDNN is held below bf16.

    ``ONEDNN_MAX_CPU_ISA`` below AVX512_CORE_BF16 (``AVX2``: what an AVX2-only CPU does) leaves oneDNN no
    bf16 kernels, while TensorFlow 2.15, deciding from the CPU's flags, still asks for them and fails or
    aborts: tests that run bf16 kernels (``bf16_kernels``) cannot run there. On a real AVX2-only CPU they
    run (emulated), so they are skipped only under the variable."""
    from estimator.common import machine

    # The slow tests first (a stable sort: a module's tests stay together, for its fixtures): the workers take
    # the long jobs while the short tests are left to fill in behind them, rather than the reverse.
    items.sort(key=lambda item: "slow" not in item.keywords)
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
def gcs_emulator(tmp_path_factory):
    """gcp-storage-emulator on loopback for google-cloud-storage and TensorFlow's own gs:// client alike
    (``tests/cloud_storage.py``), a real process; yields the variables that point both at it."""
    from tests import cloud_storage

    directory = str(tmp_path_factory.mktemp("cloud-storage"))
    try:
        with cloud_storage.running(directory) as environment:
            yield environment
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture
def gcs(gcs_emulator, monkeypatch):
    """The emulator as Cloud Storage for this test and the processes it starts, with a fresh bucket; yields
    gs://bucket."""
    from estimator.common import storage

    for name, value in gcs_emulator.items():
        monkeypatch.setenv(name, value)
    storage._client_cache.clear()
    name = "test-bucket-%d" % int(time.time() * 1e6)
    storage._client().create_bucket(name)
    yield "gs://" + name
    storage._client_cache.clear()
