"""What a first run pays for its speed probes, and the figures ``--network auto`` estimates members by.

    python -m benchmarks.probe_cost --data-dir work/cifar-10-full
    ONEDNN_MAX_CPU_ISA=AVX2 python -m benchmarks.probe_cost --data-dir D --out benchmarks/results/probe_cost_avx2.json

Start-up: for each recipe, the configuration (``estimator.budget.job.parse``: the data checked, the
precision, the member, the filter gradients and the speeds resolved) in a fresh process, as a first run
(an empty ``--probe-cache``) and again with that cache filled, each ``--rounds`` times: the seconds
between, what was timed and what was chosen. Members: each member of the family timed as the probes time
it (``speed_probes.time_network``: training at the recipes' batch of 512 and at the batch ``family.probe_batch``
gives it, evaluation at 500), ``--rounds`` rounds interleaved, the best kept; its efficiency (images/s
times multiply-adds, against the reference's) is what ``family.Member.efficiency`` holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import print_machine, write_result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ("cpu_5min", "cpu_30min")


def choices(hp) -> dict:
    """What the configuration chose and timed (``hp``: the resolved HParams, or a job's hparams.json)."""
    choice = hp.network_choice or {}
    return {
        "precision": str(hp.precision),
        "precision_probe": hp.precision_probe,
        "member": choice.get("member"),
        "timed": [c["member"] for c in choice.get("candidates", []) if c["speed"] == "timed"],
        "images_per_sec": {c["member"]: c["images_per_sec"] for c in choice.get("candidates", [])},
        "speed_probe": hp.speed_probe,
        "filter_gradients": hp.filter_gradients,
    }


def resolve_seconds(argv) -> dict:
    """In this process: seconds ``budget.job.parse(argv)`` takes (TensorFlow imported before), and its choices."""
    from estimator.budget import job as budget_job

    start = time.perf_counter()
    hp, _ = budget_job.parse(argv)
    return {"seconds": round(time.perf_counter() - start, 2), **choices(hp)}


def startup(recipe: str, data_dir: str, cache: str) -> dict:
    """``resolve_seconds`` of ``recipe`` in a fresh process with ``--probe-cache cache``."""
    with tempfile.TemporaryDirectory() as job:
        argv = ["@" + os.path.join(REPO, "estimator", "recipes", recipe + ".args"), "--data-dir", data_dir]
        argv += ["--job-dir", job, "--probe-cache", cache]
        command = [sys.executable, "-m", "benchmarks.probe_cost", "--resolve", "--"] + argv
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])


def member_speeds(data_dir: str, rounds: int, precisions, names=None) -> list:
    """Each member's (``names``' and the reference's, when given) training and evaluation images/s at batch 512 and
    at its probe batch, per precision."""
    from estimator.budget import family
    from estimator.budget import probes as speed_probes
    from estimator.training import config

    with tempfile.TemporaryDirectory() as job:
        argv = ["--data-dir", data_dir, "--job-dir", job, "--num-gpus", "0", "--network", "airbench"]
        hp, _ = config.parse(argv + ["--train-batch-size", "512", "--eval-batch-size", "500"])
    members = [m for m in family.MEMBERS if not names or m.name in names or m.name == family.REFERENCE]
    rows = []
    for name in precisions:
        best = {}
        for _ in range(rounds):
            for m in members:
                shape = hp.replace(**{name: getattr(m, name) for name in family.SHAPE})
                for batch in sorted({512, family.probe_batch(m.name, 512)}):
                    rate = speed_probes.time_network(shape.replace(train_batch_size=batch), name, max_secs=None)
                    old = best.get((m.name, batch), (0.0, 0.0))
                    best[(m.name, batch)] = (max(old[0], rate["train"]), max(old[1], rate["eval"]))
        reference = family.member(family.REFERENCE)
        ref_rate = best[(reference.name, 512)][0] * reference.forward_mflops
        for m in members:
            probe = family.probe_batch(m.name, 512)
            train, evaluate = best[(m.name, 512)]
            rows.append(
                {
                    "precision": name,
                    "member": m.name,
                    "train_512": train,
                    "eval_500": evaluate,
                    "efficiency": round(train * m.forward_mflops / ref_rate, 3),
                    "probe_batch": probe,
                    "train_at_probe_batch": best[(m.name, probe)][0],
                }
            )
    return rows


def startup_table(recipes, data_dir: str, rounds: int) -> list:
    """Each recipe's configuration as a first run and again cached, ``rounds`` times: printed, and its rows."""
    rows = []
    print(
        "\n%-10s %-6s %10s %10s %6s  %-18s %s" % ("recipe", "round", "first s", "cached s", "more", "chosen", "timed")
    )
    for recipe in recipes:
        for round_ in range(rounds):
            with tempfile.TemporaryDirectory() as cache:
                first = startup(recipe, data_dir, cache)
                cached = startup(recipe, data_dir, cache)
            row = {"recipe": recipe, "round": round_ + 1, "first": first, "cached": cached}
            row["first_run_more_secs"] = round(first["seconds"] - cached["seconds"], 2)
            rows.append(row)
            print(
                "%-10s %-6d %10.1f %10.1f %6.1f  %-18s %s"
                % (
                    recipe,
                    round_ + 1,
                    first["seconds"],
                    cached["seconds"],
                    row["first_run_more_secs"],
                    "%s (%s)" % (first["member"], first["precision"]),
                    ", ".join(first["timed"]),
                )
            )
    return rows


def members_table(rows) -> list:
    """``member_speeds``' rows, printed."""
    print(
        "\n%-9s %-18s %10s %10s %10s %8s %12s"
        % ("precision", "member", "train 512", "eval 500", "efficiency", "probe b", "train probe")
    )
    for r in rows:
        print(
            "%-9s %-18s %10.0f %10.0f %10.3f %8d %12.0f"
            % (
                r["precision"],
                r["member"],
                r["train_512"],
                r["eval_500"],
                r["efficiency"],
                r["probe_batch"],
                r["train_at_probe_batch"],
            )
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="TFRecords of the full stand-in (50,000 training images).")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-members", action="store_true", help="Only the start-up of each recipe.")
    parser.add_argument("--members", nargs="+", default=None, help="Time only these members (and the reference).")
    parser.add_argument("--out", default="benchmarks/results/probe_cost.json")
    args = parser.parse_args(argv)
    from estimator.common.machine import cpu_info, native_bf16

    print_machine()
    result = {"startup": startup_table(args.recipes, args.data_dir, args.rounds), "members": []}
    if not args.skip_members:
        precisions = ["fp32", "bf16"] if native_bf16(cpu_info()) else ["fp32"]
        result["members"] = members_table(member_speeds(args.data_dir, args.rounds, precisions, args.members))
    write_result(args.out, result)
    print("\nwrote", args.out)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--resolve"]:
        print(json.dumps(resolve_seconds(sys.argv[sys.argv.index("--") + 1 :])))
        sys.exit(0)
    sys.exit(main())
