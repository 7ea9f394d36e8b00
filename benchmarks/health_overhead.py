"""What the health rules, pictures and histograms cost: training images/s with them off and on.

    python -m benchmarks.health_overhead --data-dir work/cifar-10-full [--pairs 3] [--steps 300]

Runs the trainer as a user would, alternating ``--health-checks off
--histograms false`` (nothing of issue 9 computed) with the defaults
(``--health-checks warn``, rules every 100 steps, histograms with every
summary), ``--pairs`` times each, in one session on one machine. The speed is
the trainer's own steady-state images/s (``results.json``: after 10 warm-up
steps, so graph building and the final evaluations do not count). Reports the
median of the per-pair ratios: runs of the same settings drift by up to 20%
here, neighbours in time much less.
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile

from benchmarks.common import print_machine, write_result
from estimator.common import processes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {
    "off": ["--health-checks", "off", "--histograms", "false"],
    "default": [],  # --health-checks warn, --health-every-n-steps 100, --histograms true
}


def run(data_dir, job_dir, steps, layers, extra):
    command = processes.trainer_command(
        [
            "--data-dir",
            data_dir,
            "--job-dir",
            job_dir,
            "--num-gpus",
            "0",
            "--num-layers",
            str(layers),
            "--train-steps",
            str(steps),
            *"--seed 1 --eval-policy final --export false --save-checkpoints-secs 100000".split(),
        ]
        + extra
    )
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("failed (exit %d):\n%s" % (proc.returncode, proc.stderr[-3000:]))
    with open(os.path.join(job_dir, "results.json")) as f:
        return json.load(f)["examples_per_sec"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--num-layers", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results/health_overhead.json")
    args = parser.parse_args(argv)
    print_machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = ["off", "default"] if pair % 2 == 0 else ["default", "off"]
            speeds = {}
            for name in order:
                speeds[name] = run(
                    os.path.abspath(args.data_dir),
                    os.path.join(tmp, "%s-%d" % (name, pair)),
                    args.steps,
                    args.num_layers,
                    SETTINGS[name],
                )
            ratio = speeds["default"] / speeds["off"]
            rows.append(
                {
                    "pair": pair,
                    "off_images_per_sec": speeds["off"],
                    "default_images_per_sec": speeds["default"],
                    "ratio": round(ratio, 4),
                }
            )
            print(
                "pair %d: off %.1f img/s, default %.1f img/s, ratio %.3f"
                % (pair, speeds["off"], speeds["default"], ratio),
                flush=True,
            )
    median = statistics.median(r["ratio"] for r in rows)
    print()
    print("%-6s %12s %16s %8s" % ("pair", "off img/s", "default img/s", "ratio"))
    for r in rows:
        print(
            "%-6d %12.1f %16.1f %8.3f" % (r["pair"], r["off_images_per_sec"], r["default_images_per_sec"], r["ratio"])
        )
    print(
        "median ratio %.3f: the default health checks cost %.1f%% of training images/s" % (median, 100 * (1 - median))
    )
    write_result(
        args.out,
        {
            "num_layers": args.num_layers,
            "train_steps": args.steps,
            "settings": SETTINGS,
            "pairs": rows,
            "median_ratio": median,
            "overhead_percent": round(100 * (1 - median), 2),
        },
    )


if __name__ == "__main__":
    main()
