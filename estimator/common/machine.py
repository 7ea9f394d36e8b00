"""What a speed probe needs, below everything that measures: this CPU, and the probes' cache.

The probes (``--precision auto`` and the evaluation's speed in ``estimator.budget.probes``,
bf16 filter gradients in ``estimator.ops.filter_gradient``) time real graphs once per machine and
keep the figures in one JSON file each in a directory (the trainer's ``--probe-cache``, a local or
``gs://`` one; by default ``$CIFAR10_CACHE_DIR``, else ``~/.cache/cifar10-resnet-estimator``), so
later runs decide at once: a series of jobs, or a study's trials, that name one directory share what
the first measured. A cache that cannot be read or written costs a probe, never the job. This module
imports nothing of the package but its storage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time

from estimator.common import storage

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


# oneDNN's own variable: holds its kernels to an instruction set (``AVX2``: what an AVX2-only CPU does). Below
# AVX512_CORE_BF16 it has no bf16 kernels, and TensorFlow 2.15 then aborts on its first bf16 matrix product.
ISA_VARIABLE = "ONEDNN_MAX_CPU_ISA"
# The values of ISA_VARIABLE under which oneDNN computes bf16 natively ("" and ALL: no cap).
BF16_ISAS = (
    "",
    "ALL",
    "DEFAULT",
    "AVX512_CORE_BF16",
    "AVX512_CORE_FP16",
    "AVX10_1_512",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512_AMX_FP16",
)


def cpu_info(path: str = "/proc/cpuinfo", environ=None) -> dict:
    """This machine's CPU as far as speed goes: ``{"model", "family", "model_number", "flags" (a set),
    "cores" (this process may use), "isa" (ONEDNN_MAX_CPU_ISA, upper case; "" where unset)}`` (Linux;
    elsewhere what platform says). Under KVM the model name is often just "AMD EPYC" for three
    generations: the family, model number and flags tell them apart."""
    environ = os.environ if environ is None else environ
    model, flags = platform.processor() or platform.machine(), set()
    family = model_number = ""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                elif key == "cpu family" and not family:
                    family = value.strip()
                elif key == "model" and not model_number:
                    model_number = value.strip()
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    isa = environ.get(ISA_VARIABLE, "").strip().upper()
    return {"model": model, "family": family, "model_number": model_number, "flags": flags, "cores": cores, "isa": isa}


def cpu_key(cpu: dict) -> str:
    """What decides a probe's figures on this CPU, for cache keys: model name, family and model number,
    a digest of the flags, the cores, oneDNN's instruction-set cap."""
    flags = hashlib.sha256(" ".join(sorted(cpu.get("flags", ()))).encode()).hexdigest()[:10]
    return "%s|family %s model %s|flags %s|%s cores|isa %s" % (
        cpu.get("model", ""),
        cpu.get("family", ""),
        cpu.get("model_number", ""),
        flags,
        cpu.get("cores", ""),
        cpu.get("isa") or "any",
    )


def native_bf16(cpu: dict) -> bool:
    """Whether TensorFlow computes bf16 natively here: the CPU has AVX512-BF16 or AMX, and oneDNN is not
    held below them (``ISA_VARIABLE``); elsewhere bf16 is emulated (about 16x slower than fp32) or aborts."""
    has_flags = any(flag in cpu.get("flags", ()) for flag in NATIVE_BF16_FLAGS)
    return has_flags and cpu.get("isa", "") in BF16_ISAS


DIRECTORY_VARIABLE = "CIFAR10_CACHE_DIR"


def default_directory(environ=None) -> str:
    """The probes' directory when none is named: ``$CIFAR10_CACHE_DIR``, else the user's cache directory."""
    environ = os.environ if environ is None else environ
    return environ.get(DIRECTORY_VARIABLE) or os.path.join(
        os.path.expanduser("~"), ".cache", "cifar10-resnet-estimator"
    )


def cache_path(name: str, directory: str = None) -> str:
    """The file of cache NAME in DIRECTORY (a local or gs:// one; default ``default_directory()``)."""
    return storage.join(directory or default_directory(), name)


def _read_cache(path: str) -> dict:
    try:
        return json.loads(storage.read_text(path)) if storage.exists(path) else {}
    except Exception as e:  # noqa: BLE001 - any storage error: the probe is measured instead
        logging.getLogger("tensorflow").warning("speed probes: cannot read %s (%s): measuring", path, e)
        return {}


def _write_cache(path: str, cache: dict) -> bool:
    try:
        storage.write_text(path, json.dumps(cache, indent=2, sort_keys=True))
        return True
    except Exception as e:  # noqa: BLE001 - a cache we cannot write costs a probe next time, nothing more
        logging.getLogger("tensorflow").warning("speed probes: cannot write %s (%s)", path, e)
        return False


def cached_probe(path: str, key: str, names, measure):
    """``(probe, measured)``: the measurement cached under ``key`` in the JSON file at ``path`` if it
    has exactly ``names``, else ``measure()``'s (a dict), written back: a damaged entry is measured
    again. ``measure`` None: only what is cached (``(None, False)`` where nothing is). The probes of
    ``estimator.budget.probes`` and ``filter_gradient`` share it."""
    cache = _read_cache(path)
    probe = cache.get(key)
    if probe and set(probe) == set(names):
        return dict(probe), False
    if measure is None:
        return None, False
    probe = measure()
    store_probe(path, key, probe)
    return dict(probe), True


def store_probe(path: str, key: str, probe: dict) -> None:
    """``probe`` cached under ``key`` in the JSON file at ``path``, in place of what was there. The file is
    read again first: a study's trials share it, and another's entries written meanwhile stay."""
    cache = _read_cache(path)
    cache[key] = probe
    _write_cache(path, cache)


def seconds_per_run(sess, fetch, steps: int, warmup: int, clock=time.perf_counter, max_secs=None, min_steps=2) -> float:
    """The median wall seconds of ``sess.run(fetch)`` over at most ``steps`` runs, after ``warmup`` untimed
    ones (the first runs pay for graph optimisation, kernel selection and XLA compilation); with
    ``max_secs``, timed runs stop once they have taken that long and at least ``min_steps`` ran (a probe
    bounded in seconds costs a slow CPU no more than a fast one). The median, not the mean: a probe is
    cached for every later job on the machine, and a burst of another process during a few of its runs
    must not make them all slow."""
    for _ in range(warmup):
        sess.run(fetch)
    times = []
    for _ in range(steps):
        start = clock()
        sess.run(fetch)
        times.append(clock() - start)
        if max_secs is not None and len(times) >= min_steps and sum(times) >= max_secs:
            break
    times.sort()
    middle = len(times) // 2
    return times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
