"""What a change saves every job: one small job's whole command from this checkout and another, side by side.

    python -m benchmarks.job_cost --data-dir work/cifar-10-data --against ../base --rounds 5 \
        [--env AIP_TENSORBOARD_LOG_DIR=work/tb] [-- --num-layers 20 --train-batch-size 128]

The same small job (ResNet-8, ``--train-steps`` steps, validated, exported, a fresh job dir each time; flags after
``--`` override these, ``--env`` sets variables for both) by this checkout and by ``--against``, another with its own
``.venv`` (``make venv`` there), rounds alternated so that drift on a shared machine hits both alike. Times each
whole command, its start and its exit (``gc_cost.timed_command``), its CPU seconds and its training rate
(results.json); prints the CPU and a table of medians; writes JSON.
"""

import argparse
import json
import os
import shutil
import statistics
import sys

from benchmarks.common import print_machine, write_result
from benchmarks.gc_cost import timed_command
from estimator.common import processes

KEYS = ("wall_secs", "start_secs", "exit_secs", "cpu_secs", "examples_per_sec")


def time_rounds(ways: dict, flags, work_dir: str, rounds: int, env=None) -> dict:
    """``{way: [timed_command's row per round, with results.json's examples_per_sec]}`` for ``{way: (command before
    the job's flags, its directory)}``, alternated; ``env``: variables set for every job."""
    runs = {way: [] for way in ways}
    for r in range(rounds):
        for way, (command, cwd) in ways.items():
            job = os.path.join(work_dir, "job")
            shutil.rmtree(job, ignore_errors=True)
            row = timed_command([*command, *flags, "--job-dir", job], cwd=cwd, env=env)
            results = os.path.join(job, "results.json")
            row["examples_per_sec"] = json.load(open(results))["examples_per_sec"] if os.path.exists(results) else None
            runs[way].append(row)
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
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="Set for every job.")
    parser.add_argument("--out", default="benchmarks/results/job_cost.json")
    own, extra = processes.split_argv(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(own)
    bad = [pair for pair in args.env if not pair.partition("=")[0] or "=" not in pair]
    if bad:
        parser.error("--env %s: give NAME=VALUE" % bad[0])
    env = dict(pair.partition("=")[::2] for pair in args.env)
    print_machine()
    trainer = ["-m", "estimator.cifar10_main"]
    against = os.path.abspath(args.against)
    ways = {
        "this": ([sys.executable, *trainer], None),
        "against": ([os.path.join(against, ".venv", "bin", "python"), *trainer], against),
    }
    flags = ["--data-dir", os.path.abspath(args.data_dir)] + "--num-gpus 0 --num-layers 8 --train-batch-size 32".split()
    flags += ["--train-steps", str(args.train_steps), "--seed", "1", *extra]
    runs = time_rounds(ways, flags, os.path.abspath(args.work_dir), args.rounds, env)
    table = medians(runs)
    print("\n%-8s %12s %12s %12s %12s %12s" % ("", "command (s)", "start (s)", "exit (s)", "CPU (s)", "images/s"))
    for way, row in table.items():
        print("%-8s" % way + "".join(" %12s" % ("-" if row[k] is None else "%.2f" % row[k]) for k in KEYS))
    saved = {k: table["against"][k] - table["this"][k] for k in ("wall_secs", "cpu_secs")}
    print(
        "this checkout saves %.2f s a job and %.2f s of CPU, medians of %d rounds"
        % (saved["wall_secs"], saved["cpu_secs"], args.rounds)
    )
    write_result(args.out, {"settings": dict(vars(args), trainer_flags=flags), "runs": runs, "medians": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
