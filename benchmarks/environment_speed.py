"""Our training step under other Python environments: the same package with a TensorFlow plugin beside it
(Intel's extension), or with environment variables set, timed in turn, so that all see the same machine load.

    python -m benchmarks.environment_speed --data-dir work/cifar-10-full \\
        --env stock=.venv/bin/python itex=/tmp/itex/bin/python "itex graph=/tmp/itex/bin/python ITEX_ONEDNN_GRAPH=1"

Each environment is ``NAME=PYTHON [VAR=VALUE ...]``; each round runs each of them once, in a fresh process
(a plugin loads with TensorFlow), timing ``keras_vs_estimator.estimator_rate``. Prints a table (medians and
their ratio to the first environment's) and writes JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.common import print_machine, write_result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What one timing process runs: images/s of our model_fn, and the extension's version installed there (or None).
TIMER = """
import argparse, importlib.metadata, json, sys
from benchmarks import keras_vs_estimator as kv
a = argparse.Namespace(**json.loads(sys.argv[1]))
try:
    itex = importlib.metadata.version("intel-extension-for-tensorflow")
except importlib.metadata.PackageNotFoundError:
    itex = None
print("RESULT " + json.dumps({"rate": kv.estimator_rate(a, a.precision), "intel_extension": itex}))
"""


def environment(text: str) -> tuple:
    name, _, rest = text.partition("=")
    python, *variables = rest.split() or [""]
    if not name or not python or not all("=" in v for v in variables):
        raise argparse.ArgumentTypeError("%r: give NAME=PYTHON [VAR=VALUE ...]" % text)
    return name, python, dict(v.split("=", 1) for v in variables)


def time_once(name: str, python: str, variables: dict, settings: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", **variables)
    try:
        run = subprocess.run(
            [python, "-c", TIMER, json.dumps(settings)], cwd=REPO, env=env, capture_output=True, text=True
        )
    except OSError as e:
        raise SystemExit(
            "environment %r: %s: give a Python of a venv with this package's requirements" % (name, e)
        ) from None
    if run.returncode != 0:
        raise SystemExit("environment %r failed (exit %d):\n%s" % (name, run.returncode, run.stderr[-3000:]))
    return json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--env", type=environment, nargs="+", required=True, help="NAME=PYTHON [VAR=VALUE ...]")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--width-multiplier", type=float, default=1.0, help="airbench94's filters times this.")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/environment_speed.json")
    args = parser.parse_args(argv)
    print_machine()
    settings = dict(
        data_dir=os.path.abspath(args.data_dir),
        network="airbench",
        group_depth=2,
        num_layers=0,
        width_multiplier=args.width_multiplier,
        batch_size=args.batch_size,
        steps=args.steps,
        warmup=args.warmup,
        batch_norm_decay=0.997,
        precision=args.precision,
    )
    rows = {name: {"python": python, "variables": variables, "rounds": []} for name, python, variables in args.env}
    for r in range(args.rounds):
        for name, row in rows.items():
            timed = time_once(name, row["python"], row["variables"], settings)
            row["rounds"].append(round(timed["rate"], 1))
            row["intel_extension"] = timed["intel_extension"]
            print("  round %d %-24s %8.1f images/s" % (r + 1, name, timed["rate"]), flush=True)
    first = statistics.median(next(iter(rows.values()))["rounds"])
    print(
        "\nairbench94 x%g, %s, batch %d, median of %d rounds"
        % (args.width_multiplier, args.precision, args.batch_size, args.rounds)
    )
    print("%-24s %10s %8s  %s" % ("environment", "images/s", "ratio", "rounds"))
    for name, row in rows.items():
        row["median"] = statistics.median(row["rounds"])
        row["ratio"] = round(row["median"] / first, 3)
        print("%-24s %10.1f %8.2f  %s" % (name, row["median"], row["ratio"], " ".join(map(str, row["rounds"]))))
    write_result(args.out, {"settings": settings, "environments": rows})


if __name__ == "__main__":
    sys.exit(main())
