"""What the benchmark scripts share: machine facts and the JSON they write.

CPUs differ between this project's machines (an AMD EPYC with AVX2 only, a
Zen 4 with AVX512-BF16, a Xeon with AMX-BF16), and bf16 speed depends on those
flags more than on anything else: every benchmark prints the CPU model and its
bf16 flags, and compares only figures taken in one run.
"""

import json
import os
import platform
import signal
import sys
import time

import estimator  # noqa: F401 - sets the package's TF_ENABLE_ONEDNN_OPTS default before TensorFlow loads

BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx2")


def cpu() -> dict:
    """The CPU model and which of the flags that matter for bf16 it has (Linux)."""
    from estimator.common.machine import cpu_info

    info = cpu_info()
    return {
        "model": info["model"],
        "family": info["family"],
        "model_number": info["model_number"],
        "flags": [f for f in BF16_FLAGS if f in info["flags"]],
        # oneDNN held to an instruction set (ONEDNN_MAX_CPU_ISA=AVX2: what an AVX2-only CPU does).
        "onednn_max_cpu_isa": info["isa"] or None,
    }


def machine() -> dict:
    import tensorflow as tf

    return {
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "cpu": cpu(),
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "(TensorFlow's default)"),
    }


def print_machine() -> None:
    info = cpu()
    print(
        "CPU: %s (family %s, model %s), %d cores; flags: %s; TF_ENABLE_ONEDNN_OPTS=%s; ONEDNN_MAX_CPU_ISA=%s"
        % (
            info["model"],
            info["family"],
            info["model_number"],
            os.cpu_count(),
            " ".join(info["flags"]) or "(none of %s)" % ", ".join(BF16_FLAGS),
            os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset"),
            info["onednn_max_cpu_isa"] or "unset",
        )
    )


def stop_trainers_on_sigterm() -> None:
    """Makes SIGTERM raise SystemExit(143) in this process, so that the benchmarks which start trainers
    (``recipes.run_recipe``) stop them on the way out instead of leaving them running (``kill PID`` of a
    benchmark otherwise ends it at once, its trainer orphaned)."""

    def terminated(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)


def write_result(path: str, result: dict) -> None:
    """Writes a benchmark's result, stamped with the date, command and machine, as JSON."""
    result = dict(
        result,
        date=time.strftime("%Y-%m-%d"),
        machine=machine(),
        command="python -m "
        + " ".join(
            [
                sys.modules["__main__"].__spec__.name
                if getattr(sys.modules["__main__"], "__spec__", None)
                else sys.argv[0]
            ]
            + sys.argv[1:]
        ),
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
        f.write("\n")
