"""Does ``--time-budget`` hold when another process takes a core mid-run? Side by side, in one run.

    python -m benchmarks.contention --data-dir work/cifar-10-full --budgets 90s 5m

For each budget the recipe runs twice as a user would (``benchmarks.recipes.run_recipe``:
a fresh process, the wall time of the whole command): once with the machine to itself,
once with a competing process, a busy loop pinned to the first core the trainer may use,
started at ``--start-at`` of the budget and kept running until the trainer ends. The
trainer's two intra-op threads then share that core with it, so every step waits for
the slower thread. The budget holds when the command keeps the promise (``planner.within_promise``: the budget
plus the larger of 2 s and 1% at most, 90% of it at least); the table shows both, the steps trained
and the re-plans, and the speed of the first and the last re-plan (before and after the
competitor).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading

from benchmarks.common import print_machine, stop_trainers_on_sigterm, write_result
from benchmarks.recipes import run_recipe
from estimator.budget.planner import within_promise
from estimator.common.durations import flag as duration_flag

# A pure-Python busy loop on one core: it competes for the core and touches no memory.
BUSY_LOOP = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


# Each budget's runs: the machine to itself, then the busy loop from --start-at.
RUNS = ("alone", "competitor")


class Competitor:
    """A busy loop on ``core`` from ``delay`` seconds after ``start()`` until ``stop()``."""

    def __init__(self, core: int, delay: float):
        self.core, self.delay = core, delay
        self.process = None
        self._timer = threading.Timer(delay, self._launch)
        self._lock = threading.Lock()
        self._stopped = False

    def _launch(self):
        with self._lock:
            if not self._stopped:
                self.process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(self.core)])

    def start(self):
        self._timer.start()

    def stop(self) -> bool:
        """Stops the loop; returns whether it ever started."""
        with self._lock:
            self._stopped = True
            self._timer.cancel()
            if self.process is None:
                return False
            self.process.kill()
            self.process.wait()
            return True


def held(wall_seconds: float, budget: float) -> bool:
    """Whether a command that took ``wall_seconds`` kept ``budget`` (``time_budget.within_promise``)."""
    return within_promise(budget, wall_seconds)


def run(recipe: str, data_dir: str, job_dir: str, budget: float, compete_at) -> dict:
    competitor = None
    if compete_at is not None:
        competitor = Competitor(min(os.sched_getaffinity(0)), compete_at * budget)
        competitor.start()
    try:
        row = run_recipe(recipe, data_dir, job_dir, ["--time-budget", "%gs" % budget])
    finally:
        started = competitor.stop() if competitor else False
    replans = row.get("replans") or []
    return dict(
        row,
        budget_secs=budget,
        competitor_started_secs=round(compete_at * budget, 1) if started else None,
        used_fraction=round(row["wall_seconds"] / budget, 3),
        held=held(row["wall_seconds"], budget),
        first_steps_per_sec=replans[0]["steps_per_sec"] if replans else None,
        last_steps_per_sec=replans[-1]["steps_per_sec"] if replans else None,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="TFRecords of the full data set.")
    parser.add_argument("--recipe", default="recipes/cpu_5min.args", help="Its --time-budget is replaced.")
    parser.add_argument("--budgets", nargs="+", type=duration_flag, default=[90.0, 300.0])
    parser.add_argument(
        "--start-at", type=float, default=0.3, help="When the competitor starts, as a fraction of the budget."
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=RUNS,
        default=list(RUNS),
        help="Which runs per budget; a long budget's 'alone' may be a recipe's run already measured.",
    )
    parser.add_argument("--job-root", default=None)
    parser.add_argument("--out", default="benchmarks/results/contention.json")
    args = parser.parse_args(argv)
    if not 0 < args.start_at < 1:
        parser.error("--start-at %g: give a fraction of the budget between 0 and 1, e.g. 0.3" % args.start_at)
    stop_trainers_on_sigterm()
    print_machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for budget in args.budgets:
            for name in args.runs:
                compete_at = args.start_at if name == "competitor" else None
                job = os.path.join(args.job_root or tmp, "%gs-%s" % (budget, name))
                row = dict(
                    run(os.path.abspath(args.recipe), os.path.abspath(args.data_dir), job, budget, compete_at), run=name
                )
                rows.append(row)
                print(
                    "budget %6.0f s  %-10s  wall %6.1f s (%5.1f%%)  %-4s  steps %5d (first plan %5d)  re-plans %2d  "
                    "steps/s %s -> %s  test %.4f"
                    % (
                        budget,
                        name,
                        row["wall_seconds"],
                        100 * row["used_fraction"],
                        "held" if row["held"] else "MISSED",
                        row["global_step"],
                        row["planned_steps"],
                        len(row.get("replans") or []),
                        row["first_steps_per_sec"],
                        row["last_steps_per_sec"],
                        row["accuracy"],
                    ),
                    flush=True,
                )
                write_result(
                    args.out,
                    {"recipe": args.recipe, "data_dir": args.data_dir, "start_at": args.start_at, "runs": rows},
                )
    return 0 if all(row["held"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
