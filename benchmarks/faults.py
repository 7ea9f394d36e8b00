"""Faults injected into real trainers, and whether the job survives them: the table in docs/faults.md.

    python -m benchmarks.faults --data-dir DIR [--out benchmarks/results/faults.json]

For each fault a fresh job starts ``python -m estimator.cifar10_main`` (ResNet-8,
``STEPS`` steps, a checkpoint every ``CHECKPOINT_EVERY``), waits for a moment of
the run (a line in its log), sends a signal, then runs the same command again
until it ends. The job survives when it ends as an uninterrupted run does: the
same final step, a loadable checkpoint at it, both exports, and results.json
written exactly once (by the last run). "Steps lost" are the steps trained
before the fault that the restart trained again.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

from estimator.common import processes

STEPS = 120
CHECKPOINT_EVERY = 50
FLAGS = (
    "--num-gpus 0 --num-layers 8 --train-batch-size 32 --eval-batch-size 339 --train-steps %d "
    "--save-checkpoints-steps %d --eval-policy final --log-every-n-steps 10 --seed 3 --health-checks off"
    % (STEPS, CHECKPOINT_EVERY)
).split()

# (name, signal, the log line after which it is sent)
FAULTS = [
    ("SIGTERM during training", signal.SIGTERM, r"step [3-4]\d/%d" % STEPS),
    ("SIGINT during training", signal.SIGINT, r"step [6-7]\d/%d" % STEPS),
    ("SIGKILL during training", signal.SIGKILL, r"step [6-7]\d/%d" % STEPS),
    ("SIGTERM during a checkpoint save", signal.SIGTERM, r"Saving checkpoints for %d " % CHECKPOINT_EVERY),
    ("SIGKILL during a checkpoint save", signal.SIGKILL, r"Saving checkpoints for %d " % CHECKPOINT_EVERY),
    ("SIGTERM during the final evaluation", signal.SIGTERM, r"Saving checkpoints for %d " % STEPS),
    ("SIGINT during the exports", signal.SIGINT, r"Evaluation \[validation\] at step %d" % STEPS),
    ("SIGKILL during the exports", signal.SIGKILL, r"Evaluation \[validation\] at step %d" % STEPS),
]


def start(data_dir: str, job_dir: str):
    command = processes.trainer_command(["--data-dir", data_dir, "--job-dir", job_dir] + FLAGS)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def run_until(process, pattern: str, timeout: float = 300):
    """Reads the process's output until ``pattern`` shows (returns the output so far) or it ends."""
    regex, lines, found = re.compile(pattern), [], threading.Event()

    def read():
        for line in process.stdout:
            lines.append(line)
            if regex.search(line):
                found.set()
        found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    found.wait(timeout)
    return lines, reader


def last_step(lines) -> int:
    steps = [int(m.group(1)) for line in lines for m in [re.search(r"step (\d+)/", line)] if m]
    return max(steps) if steps else 0


def inject(data_dir: str, job_dir: str, name: str, sig, pattern: str) -> dict:
    """One fault and the restart(s) after it; returns the row of the table."""
    process = start(data_dir, job_dir)
    lines, reader = run_until(process, pattern)
    if process.poll() is not None:
        raise RuntimeError("%s: the trainer ended before %r:\n%s" % (name, pattern, "".join(lines[-20:])))
    reached = last_step(lines)
    os.killpg(process.pid, sig)
    code = process.wait(timeout=120)
    reader.join(timeout=10)
    output = "".join(lines)
    wrote_results = os.path.exists(os.path.join(job_dir, "results.json"))
    restarts, resumed_from, final = 0, None, None
    while restarts < 3:
        restarts += 1
        again = start(data_dir, job_dir)
        out, _ = again.communicate(timeout=600)
        # The restart's first progress line is the step after the checkpoint it restored.
        match = re.search(r"step (\d+)/%d" % STEPS, out)
        if resumed_from is None:
            resumed_from = int(match.group(1)) - 1 if match else STEPS
        if again.returncode == 0:
            final = out
            break
    results = json.load(open(os.path.join(job_dir, "results.json"))) if final else {}
    exports = [glob.glob(os.path.join(job_dir, "export", kind, "[0-9]*")) for kind in ("best", "final")]
    import tensorflow as tf

    checkpoint = tf.train.latest_checkpoint(job_dir)
    loadable = bool(checkpoint) and tf.train.load_checkpoint(checkpoint).get_tensor("global_step") == STEPS
    survived = bool(final) and results.get("global_step") == STEPS and loadable and all(exports) and not wrote_results
    return {
        "fault": name,
        "signal": signal.Signals(sig).name,
        "exit_code": code,
        "expected_exit_code": {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGKILL: -9}[sig],
        "said": next((line.strip() for line in output.splitlines() if "The same command resumes" in line), None),
        "step_at_fault": reached,
        "resumed_from": resumed_from,
        "steps_lost": max(0, reached - (resumed_from or 0)) if reached < STEPS else 0,
        "results_before_end": wrote_results,
        "restarts": restarts,
        "final_step": results.get("global_step"),
        "survived": survived,
    }


def run_matrix(data_dir: str, work_dir: str, faults=FAULTS):
    rows = []
    for i, (name, sig, pattern) in enumerate(faults):
        rows.append(inject(data_dir, os.path.join(work_dir, "job%d" % i), name, sig, pattern))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="TFRecords (the mini archive's are enough).")
    parser.add_argument("--out", default="benchmarks/results/faults.json")
    args = parser.parse_args(argv)
    from benchmarks.common import print_machine, write_result

    print_machine()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_matrix(os.path.abspath(args.data_dir), tmp)
    print("%-38s %-5s %-8s %-10s %-8s %-6s %s" % ("fault", "exit", "at step", "resumed", "lost", "final", "survived"))
    for r in rows:
        print(
            "%-38s %-5s %-8s %-10s %-8s %-6s %s"
            % (
                r["fault"],
                r["exit_code"],
                r["step_at_fault"],
                r["resumed_from"],
                r["steps_lost"],
                r["final_step"],
                r["survived"],
            )
        )
    print("%d of %d faults survived" % (sum(r["survived"] for r in rows), len(rows)))
    write_result(
        args.out, {"data_dir": args.data_dir, "steps": STEPS, "checkpoint_every": CHECKPOINT_EVERY, "runs": rows}
    )
    return 0 if all(r["survived"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
