"""What a speed probe needs, below everything that measures: this CPU, and the probes' cache.

The probes (``--precision auto`` and the evaluation's speed in ``estimator.training.precision``,
bf16 filter gradients in ``estimator.ops.filter_gradient``) time real graphs once per machine and
keep the figures in one JSON file each under ``~/.cache/cifar10-resnet-estimator``
(``$CIFAR10_CACHE_DIR`` overrides the directory), so later runs decide at once. This module
imports nothing of the package.
"""

from __future__ import annotations

import json
import os
import platform
import time

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_info(path: str = "/proc/cpuinfo") -> dict:
    """``{"model": ..., "flags": set(...)}`` of this machine's CPU (Linux; elsewhere what platform says)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "flags": flags}


def native_bf16(flags) -> bool:
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def cache_path(name: str) -> str:
    base = os.environ.get("CIFAR10_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "cifar10-resnet-estimator"
    )
    return os.path.join(base, name)


def _read_cache(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write_cache(path: str, cache: dict) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = "%s.tmp-%d" % (path, os.getpid())
        with open(temporary, "w") as f:
            json.dump(cache, f, indent=2, sort_keys=True)
        os.replace(temporary, path)
    except OSError:
        pass  # a cache we cannot write costs a probe next time, nothing more


def cached_probe(path: str, key: str, names, measure):
    """``(probe, measured)``: the measurement cached under ``key`` in the JSON file at ``path`` if it
    has exactly ``names``, else ``measure()``'s (a dict), written back: a damaged entry is measured
    again. The probes of this module and ``filter_gradient`` share it."""
    cache = _read_cache(path)
    probe = cache.get(key)
    if probe and set(probe) == set(names):
        return dict(probe), False
    probe = measure()
    cache[key] = probe
    _write_cache(path, cache)
    return dict(probe), True


def seconds_per_run(sess, fetch, steps: int, warmup: int) -> float:
    """Mean wall seconds of ``sess.run(fetch)`` over ``steps`` runs, after ``warmup`` untimed ones
    (the first runs pay for graph optimisation, kernel selection and XLA compilation)."""
    for _ in range(warmup):
        sess.run(fetch)
    start = time.perf_counter()
    for _ in range(steps):
        sess.run(fetch)
    return (time.perf_counter() - start) / steps
