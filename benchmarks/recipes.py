"""Time to accuracy of the recipes: runs each as a user would, from a cold start.

    python -m benchmarks.recipes --data-dir work/cifar-10-full recipes/cpu_5min.args
    python -m benchmarks.recipes --data-dir D recipes/cpu_5min.args -- --num-layers 14   # a variant

Each recipe runs as ``python -m estimator.cifar10_main @RECIPE --data-dir D
--job-dir J [extra flags]`` in a fresh process; the wall time covers
everything a user waits for: starting Python and TensorFlow, building the
graph, training, and the final evaluations of the validation and test splits.
Prints a table and writes JSON (with the CPU, since wall times depend on it).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import print_machine, stop_trainers_on_sigterm, write_result
from estimator.common import processes, storage
from estimator.networks import registry
from estimator.training.hparams import HParams

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_recipe(recipe: str, data_dir: str, job_dir: str, extra) -> dict:
    """Runs one recipe to the end; returns its results.json plus the wall time."""
    command = processes.trainer_command(["@" + recipe, "--data-dir", data_dir, "--job-dir", job_dir] + list(extra))
    start = time.perf_counter()
    # The trainer runs in a session of its own, and whatever ends this process first ends it (SIGTERM
    # reaches here as SystemExit: stop_trainers_on_sigterm): a benchmark killed half-way would otherwise
    # leave its trainer running for the rest of its budget, and every later timing on the machine wrong.
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = proc.communicate()
    except BaseException:
        processes.stop_group(proc)
        raise
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit("%s failed (exit %d):\n%s" % (recipe, proc.returncode, stderr[-3000:]))
    results = json.loads(storage.read_text(storage.join(job_dir, "results.json")))
    hparams = json.loads(storage.read_text(storage.join(job_dir, "hparams.json")))["hparams"]
    return {
        "recipe": os.path.relpath(recipe, REPO),
        "extra_flags": list(extra),
        "wall_seconds": round(wall, 1),
        "precision": hparams["precision"],
        "network": registry.describe(HParams.from_dict(hparams)),
        # A ResNet's depth; other networks have their own fixed layers.
        "num_layers": hparams["num_layers"] if hparams.get("network", "resnet") == "resnet" else None,
        # --network auto's member, where it chose one; and the optimizer.
        "member": (hparams.get("network_choice") or {}).get("member"),
        "optimizer": hparams.get("optimizer", "sgd"),
        **results,
    }


def _percent(value) -> str:
    return "-" if value is None else "%.4f" % value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recipes",
        description=__doc__.split("\n")[0],
        usage="%(prog)s --data-dir DIR [--job-root DIR] [--out JSON] RECIPE... [-- <trainer flags>]",
    )
    parser.add_argument("recipes", nargs="+", help="Flag files under recipes/.")
    parser.add_argument("--data-dir", required=True, help="TFRecords of the full data set.")
    parser.add_argument("--job-root", default=None, help="Where the jobs go (default: a temporary directory).")
    parser.add_argument("--out", default="benchmarks/results/recipes.json")
    return parser


def main(argv=None):
    argv, extra = processes.split_argv(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    stop_trainers_on_sigterm()
    print_machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes:
            job = os.path.join(args.job_root or tmp, os.path.splitext(os.path.basename(recipe))[0])
            row = run_recipe(os.path.abspath(recipe), os.path.abspath(args.data_dir), job, extra)
            rows.append(row)
            print(
                "%-28s %-5s %-22s steps %6d  wall %7.1f s  train %7.1f s  test acc %.4f  flip-TTA %s  "
                "TTA %s  validation %s"
                % (
                    row["recipe"],
                    row["precision"],
                    row["network"],
                    row["global_step"],
                    row["wall_seconds"],
                    row["train_seconds"],
                    row["accuracy"],
                    _percent(row.get("accuracy_flip_tta")),
                    _percent(row.get("accuracy_tta")),
                    _percent(row.get("validation_accuracy")),
                ),
                flush=True,
            )
    write_result(args.out, {"data_dir": args.data_dir, "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
