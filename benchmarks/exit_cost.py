"""What a command's exit costs: ``processes.exit_with`` (every command's) beside ``sys.exit``, in one run.

    python -m benchmarks.exit_cost --data-dir work/cifar-10-data --rounds 5 [--core-taken]

Runs the same small job (ResNet-8, ``--train-steps`` steps, a fresh job dir each time) three ways, rounds
alternated: the trainer module's ``main`` ended by ``processes.exit_with`` (the objects frozen, so the
interpreter's last garbage collections skip them), the same ``main`` ended by ``sys.exit``, and the
trainer's command as users run it, ``python -m estimator.cifar10_main``. Times each whole command and
its exit: from the summary's last line on stdout (printed once results.json is written) to the process's
end, which includes closing the event files and releasing the job dir's lock. ``--core-taken``: with
``benchmarks.contention``'s busy loop on the first core throughout. Prints the CPU and a table of medians;
writes JSON.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks.common import print_machine, write_result
from benchmarks.contention import Competitor

# The same module's main either way: only the exit differs.
WAYS = {
    "exit_with": ["-c", "from estimator import cifar10_main as m; m.processes.exit_with(m.main())"],
    "sys.exit": ["-c", "import sys; from estimator import cifar10_main as m; sys.exit(m.main())"],
    "python -m": ["-m", "estimator.cifar10_main"],
}


def timed_command(command) -> dict:
    """One command: its wall seconds, and the seconds from its last line on stdout to its exit."""
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    last = start
    for _ in proc.stdout:
        last = time.monotonic()
    code = proc.wait()
    end = time.monotonic()
    if code != 0:
        raise SystemExit("error: %s exited with %d: run it by hand to see why" % (" ".join(command), code))
    return {"wall_secs": round(end - start, 3), "exit_secs": round(end - last, 3)}


def time_rounds(args) -> dict:
    """``{way: [timed_command's row per round]}``, the ways alternated in each round."""
    runs = {way: [] for way in WAYS}
    for r in range(args.rounds):
        for way in WAYS:  # alternated, so drift on a shared machine hits both alike
            job = os.path.join(args.work_dir, "job")
            shutil.rmtree(job, ignore_errors=True)
            flags = ["--data-dir", args.data_dir, "--job-dir", job, "--num-gpus", "0", "--num-layers", "8"]
            flags += ["--train-steps", str(args.train_steps), "--train-batch-size", "32", "--seed", "1"]
            runs[way].append(timed_command([sys.executable, *WAYS[way], *flags]))
            print("round %d %-9s %s" % (r + 1, way, runs[way][-1]), flush=True)
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="TFRecords (generate_cifar10_tfrecords.py).")
    parser.add_argument("--work-dir", default="work/exit_cost", help="The jobs' directories go here.")
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core-taken", action="store_true", help="A busy loop on the first core throughout.")
    parser.add_argument("--out", default="benchmarks/results/exit_cost.json")
    args = parser.parse_args(argv)
    print_machine()
    competitor = Competitor(min(os.sched_getaffinity(0)), 0.0) if args.core_taken else None
    if competitor:
        competitor.start()
    try:
        runs = time_rounds(args)
    finally:
        if competitor:
            competitor.stop()
    print("\n%-10s %14s %14s" % ("exit", "command (s)", "its exit (s)"))
    medians = {}
    for way, rows in runs.items():
        medians[way] = {key: round(statistics.median(row[key] for row in rows), 3) for key in rows[0]}
        print("%-10s %14.2f %14.2f" % (way, medians[way]["wall_secs"], medians[way]["exit_secs"]))
    saved = medians["sys.exit"]["exit_secs"] - medians["exit_with"]["exit_secs"]
    print("exit_with saves %.2f s of each command's exit (medians of %d rounds)" % (saved, args.rounds))
    write_result(args.out, {"settings": vars(args), "runs": runs, "medians": medians})
    return 0


if __name__ == "__main__":
    sys.exit(main())
