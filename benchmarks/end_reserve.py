"""How much of the end's reserve the recorded runs left unused, and what a smaller fixed reserve would do.

    python -m benchmarks.end_reserve [--results benchmarks/results] [--cuts 3 3.5 4 5]

Reads every run a benchmark recorded with a ``--time-budget`` (``results.json``'s ``final_secs_reserved``,
``final_secs``, ``wall_seconds``: the whole command, as ``benchmarks.recipes`` times it), whatever the CPU,
network or budget. Each run's end left ``reserved - final`` seconds unused. Had
``time_budget.FINAL_FIXED_SECS`` been ``cut`` seconds lower, training would have run ``cut`` seconds
longer (or, where less was left, the views that no longer fit would have been dropped): the command would
have ended at ``wall + min(cut, unused)``. The table prints, per cut, the worst end against the budget
(the promise is +1 s) and how many runs would have passed it. Runs that record their test evaluation's
seconds (``final_test_eval_secs``) also show what the rest of their end took: the part the fixed reserve
(``FINAL_FIXED_SECS``) is kept for, less the evaluation's graph and restore. It measures nothing itself:
it reads runs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os

from benchmarks.common import write_result
from estimator.budget.planner import BUDGET_TOLERANCE_SECS, BUDGET_TOLERANCE_SHARE, FINAL_FIXED_SECS


def recorded_runs(directory: str) -> list:
    """``(file name, run)`` for every run with a budget, a whole-command wall time and an end's record."""
    runs = []

    def walk(node, name):
        if isinstance(node, dict):
            if all(node.get(k) is not None for k in ("final_secs", "final_secs_reserved", "time_budget_secs")):
                if node.get("wall_seconds") is not None:
                    runs.append((name, node))
            for value in node.values():
                walk(value, name)
        elif isinstance(node, list):
            for value in node:
                walk(value, name)

    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            walk(json.load(f), os.path.basename(path))
    return runs


def with_cut(run: dict, cut: float) -> float:
    """The seconds past its budget ``run`` would have ended with a reserve ``cut`` seconds smaller."""
    unused = run["final_secs_reserved"] - run["final_secs"]
    return run["wall_seconds"] + min(cut, max(0.0, unused)) - run["time_budget_secs"]


def tolerance(budget_secs: float) -> float:
    """The seconds past its budget the promise allows a command (``time_budget.within_promise``)."""
    return max(BUDGET_TOLERANCE_SECS, BUDGET_TOLERANCE_SHARE * budget_secs)


def rest_of_end(runs) -> list:
    """Sorted seconds each run's end took besides its test evaluation, for the runs that record it."""
    return sorted(run["final_secs"] - run["final_test_eval_secs"] for _, run in runs if "final_test_eval_secs" in run)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", default="benchmarks/results")
    parser.add_argument("--cuts", type=float, nargs="+", default=[3.0, 3.5, 4.0, 5.0])
    parser.add_argument("--out", default=None, help="JSON to write (none by default: it only reads runs).")
    args = parser.parse_args(argv)
    runs = [(name, run) for name, run in recorded_runs(args.results) if name != os.path.basename(args.out or "")]
    if not runs:
        parser.error("no recorded run with a budget under %s" % args.results)
    unused = sorted(run["final_secs_reserved"] - run["final_secs"] for _, run in runs)
    print(
        "%d runs; the end's reserve left unused: least %.2f s, median %.2f s"
        % (len(runs), unused[0], unused[len(unused) // 2])
    )
    rest = rest_of_end(runs)
    if rest:
        print(
            "%d runs record their test evaluation: the rest of the end took %.2f-%.2f s, median %.2f "
            "(the fixed reserve: %.1f s)" % (len(rest), rest[0], rest[-1], rest[len(rest) // 2], FINAL_FIXED_SECS)
        )
    print("\n%8s %12s %8s  %s" % ("cut s", "worst end", "within", "worst run"))
    rows = []
    for cut in args.cuts:
        name, worst = max(runs, key=lambda r: with_cut(r[1], cut))
        within = sum(with_cut(run, cut) <= tolerance(run["time_budget_secs"]) for _, run in runs)
        rows.append({"cut_secs": cut, "worst_past_budget_secs": round(with_cut(worst, cut), 2), "within": within})
        print(
            "%8.1f %+11.2fs %5d/%d  %s (budget %gs)"
            % (cut, with_cut(worst, cut), within, len(runs), name, worst["time_budget_secs"])
        )
    if args.out:
        record = {"runs": len(runs), "least_unused_secs": round(unused[0], 2), "cuts": rows}
        if rest:
            record["rest_of_end_secs"] = {"runs": len(rest), "least": round(rest[0], 2), "most": round(rest[-1], 2)}
        write_result(args.out, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
