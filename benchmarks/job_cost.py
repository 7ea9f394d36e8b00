"""What a change saves every job: one small job's whole command from this checkout and another, side by side.

    python -m benchmarks.job_cost --data-dir work/cifar-10-data --against ../base --rounds 5

The same small job (ResNet-8, ``--train-steps`` steps, validated, exported, a fresh job dir each time) by this
checkout and by ``--against``, another with its own ``.venv`` (``make venv`` there), rounds alternated so that
drift on a shared machine hits both alike. Times each whole command, its start and its exit
(``gc_cost.timed_command``) and its CPU seconds; prints the CPU and a table of medians; writes JSON.
"""

import argparse
import os
import shutil
import statistics
import sys

from benchmarks.common import print_machine, write_result
from benchmarks.gc_cost import timed_command

KEYS = ("wall_secs", "start_secs", "exit_secs", "cpu_secs")


def time_rounds(ways: dict, flags, work_dir: str, rounds: int) -> dict:
    """``{way: [timed_command's row per round]}`` for ``{way: (command before the job's flags, its directory)}``,
    alternated."""
    runs = {way: [] for way in ways}
    for r in range(rounds):
        for way, (command, cwd) in ways.items():
            job = os.path.join(work_dir, "job")
            shutil.rmtree(job, ignore_errors=True)
            runs[way].append(timed_command([*command, *flags, "--job-dir", job], cwd=cwd))
            print("round %d %-8s %s" % (r + 1, way, runs[way][-1]), flush=True)
    return runs


def medians(runs: dict) -> dict:
    """``{way: {key: the median of its rounds}}``; None where a round had no figure (no log line)."""

    def median(values):
        return None if None in values else round(statistics.median(values), 3)

    return {way: {k: median([row[k] for row in rows]) for k in KEYS} for way, rows in runs.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="TFRecords (generate_cifar10_tfrecords.py).")
    parser.add_argument("--against", required=True, help="The other checkout, with its .venv.")
    parser.add_argument("--work-dir", default="work/job_cost", help="The jobs' directories go here.")
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/job_cost.json")
    args = parser.parse_args(argv)
    print_machine()
    trainer = ["-m", "estimator.cifar10_main"]
    against = os.path.abspath(args.against)
    ways = {
        "this": ([sys.executable, *trainer], None),
        "against": ([os.path.join(against, ".venv", "bin", "python"), *trainer], against),
    }
    flags = ["--data-dir", os.path.abspath(args.data_dir)] + "--num-gpus 0 --num-layers 8 --train-batch-size 32".split()
    flags += ["--train-steps", str(args.train_steps), "--seed", "1"]
    runs = time_rounds(ways, flags, os.path.abspath(args.work_dir), args.rounds)
    table = medians(runs)
    print("\n%-8s %12s %12s %12s %12s" % ("", "command (s)", "start (s)", "exit (s)", "CPU (s)"))
    for way, row in table.items():
        print("%-8s %12.2f %12.2f %12.2f %12.2f" % (way, *(row[k] for k in KEYS)))
    saved = {k: table["against"][k] - table["this"][k] for k in ("wall_secs", "cpu_secs")}
    print(
        "this checkout saves %.2f s a job and %.2f s of CPU, medians of %d rounds"
        % (saved["wall_secs"], saved["cpu_secs"], args.rounds)
    )
    write_result(args.out, {"settings": vars(args), "runs": runs, "medians": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
