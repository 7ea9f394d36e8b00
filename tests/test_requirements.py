"""The pins resolve, with pip's own resolver, for every Python the package promises and for the container.

``pip install --dry-run --python-version V --platform P`` asks the package index what would be installed
for another interpreter, but evaluates environment markers against the interpreter running pip: so the
markers of requirements.txt are evaluated here for the target first (``packaging``, as pip does), and the
remaining pins resolved for it. Pins published only as source (``cloudml-hypertune``) cannot be resolved
for another platform's wheels: they are checked to exist on the index as source. These tests ask the
package index (PyPI), as ``make`` does.
"""

import json
import os
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from tests.helpers import REPO

PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64")
# Published on PyPI as a source distribution only: pure Python, installed from source on any Python.
SOURCE_ONLY = {"cloudml-hypertune"}
# python_requires of setup.py: the Pythons TensorFlow 2.15 has wheels for.
PYTHONS = ("3.9", "3.10", "3.11")


def _marker_environment(python):
    return {
        "python_version": python,
        "python_full_version": python + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }


def requirements_for(path, python):
    """The requirements of PATH (and the files it includes with -r) that apply on Linux x86-64 CPython PYTHON."""
    out = []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out += requirements_for(os.path.join(os.path.dirname(path), line[3:].strip()), python)
        elif line:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(_marker_environment(python)):
                out.append(requirement)
    return out


def resolve(requirements, python, tmp_path):
    """What pip would install for CPython PYTHON on Linux x86-64: {name: version}; fails with pip's words."""
    listed = tmp_path / ("requirements-%s.txt" % python)
    listed.write_text(
        "".join(
            "%s%s\n" % (r.name + "".join(sorted("[%s]" % e for e in r.extras)), r.specifier)
            for r in requirements
            if r.name not in SOURCE_ONLY
        )
    )
    report = tmp_path / ("report-%s.json" % python)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--only-binary=:all:",
            "--python-version",
            python,
            *platforms,
            "--target",
            str(tmp_path / "target"),
            "--report",
            str(report),
            "-r",
            str(listed),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    assert proc.returncode == 0, "\n".join(errors) or proc.stderr[-3000:]
    return {
        item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.load(open(report))["install"]
    }


def _pins(requirements):
    return {r.name.lower(): str(r.specifier).lstrip("=") for r in requirements if str(r.specifier).startswith("==")}


@pytest.mark.slow
@pytest.mark.parametrize("python", PYTHONS)
def test_make_installs_on_every_python_the_package_promises(python, tmp_path):
    """`make` builds .venv from requirements-test.txt (which includes requirements.txt) on 3.9, 3.10 or 3.11."""
    requirements = requirements_for(os.path.join(REPO, "requirements-test.txt"), python)
    resolved = resolve(requirements, python, tmp_path)
    for name, version in _pins(requirements).items():
        if name not in SOURCE_ONLY:
            assert resolved.get(name) == version, (name, version, resolved.get(name))
    assert resolved["tensorflow-cpu"] == "2.15.1" and resolved["numpy"] == "1.26.4"


def _dockerfile():
    text = open(os.path.join(REPO, "Dockerfile")).read()
    python = re.search(r"^ARG PYTHON_VERSION=(\S+)$", text, re.M).group(1)
    assert re.search(r"^FROM python:\$\{PYTHON_VERSION\}-slim$", text, re.M)
    cpu = re.search(r'^ARG TENSORFLOW="([^"]+)"$', text, re.M).group(1)
    gpu = re.search(r'--build-arg TENSORFLOW="([^"]+)"', text).group(1)
    return text, python, cpu, gpu


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_the_containers_pins_resolve_for_its_python_and_platform(variant, tmp_path):
    """Both images install requirements.txt (its TensorFlow line replaced by the variant's, as the Dockerfile's
    sed does) on the base image's Python; then the package itself, with no dependencies of its own."""
    text, python, cpu, gpu = _dockerfile()
    tensorflow = Requirement(cpu if variant == "cpu" else gpu)
    requirements = [
        r if r.name != "tensorflow-cpu" else tensorflow
        for r in requirements_for(os.path.join(REPO, "requirements.txt"), python)
    ]
    assert tensorflow in requirements
    if variant == "cpu" and python in PYTHONS:
        # requirements.txt as it is, on a Python `make` installs on: the test above resolves it there with
        # requirements-test.txt's pins on top, so it resolves alone too (one pip resolution less).
        assert tensorflow in requirements_for(os.path.join(REPO, "requirements.txt"), python)
        return
    resolved = resolve(requirements, python, tmp_path)
    assert resolved[tensorflow.name] == "2.15.1"
    if variant == "gpu":
        assert "tensorflow-cpu" not in resolved and any(name.startswith("nvidia-cudnn") for name in resolved)


@pytest.mark.slow
def test_pins_published_only_as_source_exist_on_the_index(tmp_path):
    [hypertune] = [r for r in requirements_for(os.path.join(REPO, "requirements.txt"), "3.10") if r.name in SOURCE_ONLY]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary=:all:",
            "-d",
            str(tmp_path),
            str(hypertune),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [
        n for n in os.listdir(str(tmp_path)) if n.startswith("cloudml_hypertune") or n.startswith("cloudml-hypertune")
    ]


def test_the_container_installs_the_pins_and_runs_the_trainer_as_the_job_configs_call_it():
    from estimator.cloud import vertex_job

    text, python, cpu, gpu = _dockerfile()
    assert python in PYTHONS
    [pinned] = [
        r for r in requirements_for(os.path.join(REPO, "requirements.txt"), python) if r.name == "tensorflow-cpu"
    ]
    assert Requirement(cpu) == pinned and gpu == "tensorflow[and-cuda]" + str(pinned.specifier)
    # The sed that puts the GPU variant's TensorFlow in place matches the pin's line.
    assert "s/^tensorflow-cpu==.*/${TENSORFLOW}/" in text
    assert any(line.startswith("tensorflow-cpu==") for line in open(os.path.join(REPO, "requirements.txt")))
    assert "pip install --no-cache-dir -r /tmp/requirements.txt" in text and "COPY requirements.txt ." in text
    assert "COPY setup.py MANIFEST.in" in text and "pip install --no-cache-dir --no-deps ." in text
    # The driver of a Vertex AI GPU machine, which Google's device plugin mounts under /usr/local/nvidia, is on the
    # loader's path; TensorFlow 2.15.1's own libraries find pip's CUDA beside them (their RUNPATH: docs/cloud.md).
    [path] = re.findall(r"LD_LIBRARY_PATH=(\S+)", text)
    assert path.split(":")[0] == "/usr/local/nvidia/lib64" and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text
    assert "--platform linux/amd64" in text
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))
    job = vertex_job.custom_job_spec(
        {"scaleTier": "BASIC"}, ["--data-dir=gs://b/d"], vertex_job.JobOptions(image_uri="i:1")
    )
    assert entrypoint == job["workerPoolSpecs"][0]["containerSpec"]["command"]
