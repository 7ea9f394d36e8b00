"""The package the service installs: sdist, pip, a run outside the source tree, Python 3.9 syntax, make's Python."""

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile

import pytest

from tests.helpers import REPO


def test_code_runs_on_the_oldest_python_tensorflow_215_supports():
    # TensorFlow 2.15 has wheels for Python 3.9-3.11 (Vertex AI's images ran 3.10): no newer syntax.
    vermin = os.path.join(os.path.dirname(sys.executable), "vermin")
    proc = subprocess.run(
        [
            vermin,
            *(
                "--target=3.9- --no-tips --violations --no-parse-comments estimator "
                "generate_cifar10_tfrecords.py setup.py"
            ).split(),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_sdist_installs_with_pip_and_trains_outside_the_source_tree(tmp_path, mini_records):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(dist)], cwd=REPO, check=True, capture_output=True
    )
    [sdist] = glob.glob(str(dist / "cifar10-resnet-estimator-*.tar.gz")) or glob.glob(
        str(dist / "cifar10_resnet_estimator-*.tar.gz")
    )
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    assert {
        "estimator/cifar10_main.py",
        "estimator/cifar10.py",
        "estimator/local_cluster.py",
        "generate_cifar10_tfrecords.py",
        "setup.py",
        "estimator/recipes/cpu_5min.args",
        "estimator/recipes/cpu_30min.args",
        "estimator/recipes/he2016_resnet56.args",
        "estimator/recipes/tutorial_defaults.args",
    } <= names

    # A Python of its own whose only copy of the package is the installed one; the
    # dependencies come from this environment's site-packages, added by a .pth
    # line (so this environment's editable install of the repo is not seen).
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    site = glob.glob(str(env_dir / "lib" / "python*" / "site-packages"))[0]
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", site, sdist],
        check=True,
        capture_output=True,
    )
    [metadata] = glob.glob(os.path.join(site, "cifar10_resnet_estimator-*.dist-info", "METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in open(metadata) if line.startswith("Requires-Dist:")]
    for dependency in ("google-cloud-storage", "cloudml-hypertune", "pyyaml", "requests", "tqdm"):
        assert any(r.lower().startswith(dependency) for r in requires), (dependency, requires)
    # TensorFlow only as an extra: the runtime brings its own.
    assert all("extra ==" in r for r in requires if r.lower().startswith("tensorflow"))

    python = str(env_dir / "bin" / "python")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONPATH", None)
    where = subprocess.run(
        [python, "-c", "import estimator; print(estimator.__file__)"],
        cwd=str(elsewhere),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(site), where
    proc = subprocess.run(
        [
            python,
            "-m",
            "estimator.cifar10_main",
            # A recipe by name, from the installed package, in a directory without recipes/.
            "--recipe",
            "tutorial_defaults",
            "--data-dir",
            mini_records,
            "--job-dir",
            str(elsewhere / "job"),
            *"--num-gpus 0 --num-layers 8 --train-steps 5 --train-batch-size 16".split(),
        ],
        cwd=str(elsewhere),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.exists(str(elsewhere / "job" / "results.json"))
    recorded = json.load(open(str(elsewhere / "job" / "hparams.json")))["hparams"]
    assert recorded["recipe"] == "tutorial_defaults" and recorded["num_layers"] == 8  # a later flag won


def _lint_imports(root):
    env = dict(os.environ, PYTHONPATH=str(root))
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    return subprocess.run([lint, "--no-cache"], cwd=str(root), env=env, capture_output=True, text=True, timeout=300)


def test_the_layers_hold_and_an_import_up_a_layer_breaks_them(tmp_path):
    """The import-linter contracts of pyproject.toml (docs/layout.md): kept by the package as it is, and
    broken, naming the import, by one upward import hidden inside a function of a copy of it."""
    shutil.copytree(
        os.path.join(REPO, "estimator"), tmp_path / "estimator", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(os.path.join(REPO, "pyproject.toml"), tmp_path)
    kept = _lint_imports(tmp_path)
    assert kept.returncode == 0 and "7 kept, 0 broken" in kept.stdout, kept.stdout + kept.stderr
    records = tmp_path / "estimator" / "data" / "records.py"
    records.write_text(records.read_text() + "\n\ndef _late():\n    from estimator.training import hparams  # noqa\n")
    broken = _lint_imports(tmp_path)
    assert broken.returncode == 1, broken.stdout
    assert "estimator.data.records -> estimator.training.hparams" in broken.stdout
    assert "Data, networks and their kernels never import what trains" in broken.stdout and "BROKEN" in broken.stdout
    # The core, the job loop included, runs without the budget.
    records.write_text(records.read_text().rsplit("\n\ndef _late", 1)[0] + "\n")
    job = tmp_path / "estimator" / "train.py"
    job.write_text(job.read_text() + "\n\ndef _late():\n    from estimator.budget import planner  # noqa\n")
    broken = _lint_imports(tmp_path)
    assert "estimator.train -> estimator.budget.planner" in broken.stdout, broken.stdout
    assert "The host (the core and the job loop) imports no guest" in broken.stdout


_LOADED = """
import json
import sys
from estimator import cifar10_main, train
hp = cifar10_main.parse(sys.argv[1:])
train.build_hooks(hp, cifar10_main.job_guests(hp))
skipped = "googleapiclient.discovery" in sys.modules  # installed with the tests; TensorFlow's import wants it
import googleapiclient.discovery  # still importable after the command's imports
print(json.dumps([sorted({m.split(".")[1] for m in sys.modules if m.startswith("estimator.")}), skipped]))
"""


def test_a_run_without_a_budget_never_loads_the_budget(mini_records, tmp_path):
    """The job's flags resolved and its hooks built, as ``cifar10_main`` does: the budget's package is loaded
    only for a job that asks for it, and neither the cloud tools, the tuner nor Google's API client ever."""
    argv = ["--data-dir", mini_records, "--num-gpus", "0", "--network", "airbench", "--precision", "fp32"]
    argv += ["--probe-cache", str(tmp_path / "probes"), "--export", "false"]

    def loaded(*more):
        job = ["--job-dir", str(tmp_path / ("job%d" % len(more)))]
        proc = subprocess.run(
            [sys.executable, "-c", _LOADED, *argv, *job, *more], cwd=REPO, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        modules, api_client = json.loads(proc.stdout.strip().splitlines()[-1])
        assert api_client is False  # processes.SKIPPED_IMPORTS
        return modules

    plain = loaded("--train-steps", "10")
    assert "training" in plain and "budget" not in plain and not {"cloud", "tuning"} & set(plain), plain
    budgeted = loaded(
        "--time-budget", "60s", "--lr-schedule", "onecycle"
    )  # under the probes' threshold: nothing is timed
    assert "budget" in budgeted and not {"cloud", "tuning"} & set(budgeted), budgeted


def _bare_env(path: str) -> dict:
    """This environment with PATH, and no Python named from outside: neither ``PYTHON`` nor what an outer
    ``make test PYTHON=...`` hands its children in ``MAKEFLAGS``."""
    env = dict(os.environ, PATH=path)
    for name in ("PYTHON", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(name, None)
    return env


def _fake_bin(tmp_path, pythons):
    """A PATH of its own: ``python3`` a Python 3.12 (it fails the Makefile's version check, as 3.12
    does), the given real interpreters, and the few tools make's recipes use."""
    import shutil as sh

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\ncase \"$1\" in --version) echo 'Python 3.12.3';; *) exit 1;; esac\n")
    fake.chmod(0o755)
    for name in pythons:  # this interpreter (3.9-3.11, as the suite runs on one) under that name
        os.symlink(os.path.realpath(sys.executable), bin_dir / name)
    for tool in ("cut", "sh", "echo", "test", "true"):
        os.symlink(sh.which(tool), bin_dir / tool)
    return str(bin_dir)


def test_make_finds_a_python_tensorflow_215_has_wheels_for_or_says_what_to_install(tmp_path):
    import shutil as sh

    makefile, make = os.path.join(REPO, "Makefile"), sh.which("make")
    env = _bare_env(_fake_bin(tmp_path, ["python3.11"]))
    found = subprocess.run([make, "-s", "-f", makefile, "print-python"], env=env, capture_output=True, text=True)
    assert found.stdout.strip() == "python3.11", found.stdout + found.stderr
    bare = tmp_path / "bare"
    bare.mkdir()
    env = _bare_env(_fake_bin(bare, []))
    venv = str(tmp_path / "venv")
    refused = subprocess.run(
        [make, "-s", "-f", makefile, "VENV=" + venv, "venv"], env=env, capture_output=True, text=True, cwd=REPO
    )
    assert refused.returncode != 0 and not os.path.exists(venv)
    assert refused.stderr.splitlines()[0] == (
        "make: no Python 3.9-3.11 found (python3 is 3.12.3, and TensorFlow 2.15 has no wheels for it): install "
        "python3.11 with venv (e.g. apt install python3.11-venv, or uv python install 3.11), or give "
        "PYTHON=/path/to/python3.11"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "estimator.export"],
        ["-m", "estimator.predict"],
        ["generate_cifar10_tfrecords.py"],
        ["-m", "estimator.vertex"],
        ["-m", "estimator.tune"],
        ["-m", "estimator.cifar10_main"],
    ],
)
def test_the_commands_print_no_third_party_warnings(command):
    """google.api_core's notice about this Python version and TensorFlow's C++ start-up lines are
    nothing a user can act on: kept off every command's output (``--verbose`` shows them)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, *command, "--help"], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stderr
    assert proc.stderr == "", proc.stderr


def test_make_run_without_the_archive_says_how_to_get_one(tmp_path):
    import shutil as sh

    missing = str(tmp_path / "cifar-10-python.tar.gz")
    proc = subprocess.run(
        [sh.which("make"), "-s", "run", "CIFAR10_SOURCE=" + missing, "DATA_DIR=" + str(tmp_path / "d")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and not os.path.exists(str(tmp_path / "d"))
    assert proc.stderr.splitlines()[0] == (
        "make run: %s does not exist: download the official archive with make run CIFAR10_SOURCE= (about "
        "170 MB), or name yours: make run CIFAR10_SOURCE=PATH CIFAR10_SHA256=HEX" % missing
    )


def test_the_tests_and_the_processes_they_start_write_no_file_in_the_real_home():
    """HOME, the caches and the speed probes' directory are the session's own for every process the tests start;
    conftest's ``pytest_sessionfinish`` fails the session where the package's cache in the real home changed."""
    from tests import conftest

    code = (
        "import os; from estimator.common import machine; "
        "print(os.path.expanduser('~')); print(machine.default_directory())"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    home, cache = proc.stdout.split()
    assert "cifar10-tests-" in home and home != conftest.REAL_HOME
    assert cache == os.environ["CIFAR10_CACHE_DIR"] and "cifar10-tests-" in cache
    assert not cache.startswith(os.path.join(conftest.REAL_HOME, ".cache"))


def test_the_products_comments_say_why_in_a_few_lines_and_carry_no_history():
    """A module constant's comment is a line or three pointing to its figure in the docs; no comment in
    estimator/ carries a commit hash, a date or an issue number (history lives in git, figures in docs/)."""
    import ast
    import io
    import re
    import tokenize

    history = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b|\b20\d\d-\d\d-\d\d\b|\bissue \d+")
    found = []
    for root, _, files in os.walk(os.path.join(REPO, "estimator")):
        for name in (f for f in files if f.endswith(".py")):
            path = os.path.join(root, name)
            source = open(path).read()
            lines = source.splitlines()
            for node in ast.parse(source).body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    above = 0
                    while node.lineno - 2 - above >= 0 and lines[node.lineno - 2 - above].lstrip().startswith("#"):
                        above += 1
                    if above > 3:
                        found.append("%s:%d: a %d-line comment" % (os.path.relpath(path, REPO), node.lineno, above))
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.COMMENT and history.search(token.string):
                    found.append("%s:%d: %s" % (os.path.relpath(path, REPO), token.start[0], token.string))
    assert found == []
    # The check can fail.
    assert history.search("# measured at 5447c72") and history.search("# (issue 14)")
    assert history.search("# 2026-11-29, Zen 4") and not history.search("# 1e-7, 128 channels")


def test_the_code_line_count_leaves_docstrings_comments_and_blank_lines_out(tmp_path, capsys):
    from benchmarks import code_lines

    source = (
        '"""A module."""\n\n# why\nX = 1  # one\n\n\ndef f(a,\n      b):\n    """Doc\n    string."""\n    return a\n'
    )
    assert code_lines.count(source) == (4, 3)  # X, the two lines of f's signature, its return; three of docstrings
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(source)
    (tmp_path / "pkg" / "notes.txt").write_text("x = 1\n")
    assert code_lines.main([str(tmp_path / "pkg"), "--out", str(tmp_path / "count.json")]) == 0
    assert "       4  in all (1 files; 3 docstring lines beside)" in capsys.readouterr().out
    assert json.load(open(str(tmp_path / "count.json")))["code_lines"] == 4
