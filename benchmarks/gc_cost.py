"""What the garbage collector costs a command: the trainer as it is beside the same with ``gc`` untouched, in one run.

    python -m benchmarks.gc_cost --data-dir work/cifar-10-data --rounds 5 [--core-taken]

Runs the same small job (ResNet-8, ``--train-steps`` steps, a fresh job dir each time) two ways, rounds
alternated: the trainer's command as users run it, ``python -m estimator.cifar10_main``, whose imports run
without the collector and whose exit skips its last walks (``processes.imports_uncollected``,
``processes.exit_with``), and the same module's ``main`` with ``gc.disable`` and ``gc.freeze`` made to do
nothing, ended by ``sys.exit``: the interpreter as it was before. Times each whole command, its start (to
the trainer's first log line, after its imports and flags) and its exit (from its last line, once
results.json is written and the summary printed, to the process's end). ``--core-taken``: with
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

UNTOUCHED = "gc untouched"
WAYS = {
    "python -m": ["-m", "estimator.cifar10_main"],
    UNTOUCHED: [
        "-c",
        "import gc, sys; gc.disable = gc.freeze = lambda: None; "
        "from estimator import cifar10_main as m; sys.exit(m.main())",
    ],
}
# The trainer's first line of its own (after TensorFlow's start-up notes).
FIRST_LOG_LINE = "INFO:tensorflow:"


def timed_command(command, cwd=None, env=None) -> dict:
    """One command (in ``cwd``): its wall seconds, the seconds to its first line starting with ``FIRST_LOG_LINE``
    (stdout and stderr together; None without one), from its last line to its exit, and its CPU seconds (user and
    system: steadier than the wall on a shared machine); ``env``: variables added to this process's."""
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})),
    )
    first = None
    last = start
    for line in proc.stdout:
        last = time.monotonic()
        if first is None and line.startswith(FIRST_LOG_LINE):
            first = last
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU, which Popen.wait does not give
    end, code = time.monotonic(), os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped here: Popen must not wait for it again
    if code != 0:
        raise SystemExit("error: %s exited with %d: run it by hand to see why" % (" ".join(command), code))
    return {
        "wall_secs": round(end - start, 3),
        "start_secs": None if first is None else round(first - start, 3),
        "exit_secs": round(end - last, 3),
        "cpu_secs": round(usage.ru_utime + usage.ru_stime, 3),
    }


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
    parser.add_argument("--work-dir", default="work/gc_cost", help="The jobs' directories go here.")
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core-taken", action="store_true", help="A busy loop on the first core throughout.")
    parser.add_argument("--out", default="benchmarks/results/gc_cost.json")
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
    print("\n%-14s %12s %12s %12s" % ("", "command (s)", "start (s)", "exit (s)"))
    keys = ("wall_secs", "start_secs", "exit_secs")
    medians = {}
    for way, rows in runs.items():
        medians[way] = {key: round(statistics.median(row[key] for row in rows), 3) for key in keys}
        print("%-14s %12.2f %12.2f %12.2f" % (way, *(medians[way][k] for k in keys)))
    saved = {k: medians[UNTOUCHED][k] - medians["python -m"][k] for k in keys}
    print(
        "the command saves %.2f s (start %.2f, exit %.2f), medians of %d rounds"
        % (saved["wall_secs"], saved["start_secs"], saved["exit_secs"], args.rounds)
    )
    write_result(args.out, {"settings": vars(args), "runs": runs, "medians": medians})
    return 0


if __name__ == "__main__":
    sys.exit(main())
