"""What the benchmark scripts share: machine facts and the JSON they write."""

import json
import os
import platform
import time


def machine() -> dict:
    import tensorflow as tf

    return {"cpu_count": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
            "tensorflow": tf.__version__}


def write_result(path: str, result: dict) -> None:
    """Writes a benchmark's result, stamped with the date and the machine, as JSON."""
    result = dict(result, date=time.strftime("%Y-%m-%d"), machine=machine())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
        f.write("\n")
