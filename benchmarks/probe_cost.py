"""What a first run pays for its speed probes, and the figures ``--network auto`` estimates members by.

    python -m benchmarks.probe_cost --data-dir work/cifar-10-full
    ONEDNN_MAX_CPU_ISA=AVX2 python -m benchmarks.probe_cost --data-dir D --out benchmarks/results/probe_cost_avx2.json

Start-up: for each recipe, the configuration (``estimator.training.config.parse``: the data checked, the
precision, the member, the filter gradients and the speeds resolved) in a fresh process, as a first run
(an empty ``--probe-cache``) and again with that cache filled, each ``--rounds`` times: the seconds
between, what was timed and what was chosen. Members: each member of the family timed as the probes time
it (``speed_probes.time_network``: training at the recipes' batch of 512 and at the batch ``family.probe_batch``
gives it, evaluation at 500), ``--rounds`` rounds interleaved, the best kept; its efficiency (images/s
times multiply-adds, against the reference's) is what ``family.Member.efficiency`` holds. Spells
(``--spells HOGS``): first runs with busy processes beside one timing, the configuration alone or, with
``--whole-jobs``, the whole job to the end of its budget.
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


SPELLS = ("reference", "member")
CALM = "none"  # a first run without a spell, beside the spelled ones


def make_spell(target: str, hogs: int) -> None:
    """A VM's slow spell, made real: ``hogs`` busy processes beside the first timing of ``target`` (the
    reference member's training and evaluation, or the first other member's training), gone after it."""
    from estimator.networks import family
    from estimator.training import speed_probes

    timer, reference = speed_probes.time_network, family.member(family.REFERENCE).width_multiplier
    pending = [target]

    def in_spell(hp, *args, evaluate=True, **kwargs):
        is_reference = hp.width_multiplier == reference
        hit = (is_reference and evaluate) if target == "reference" else not is_reference
        if not (pending and hit):
            return timer(hp, *args, evaluate=evaluate, **kwargs)
        pending.clear()
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        try:
            return timer(hp, *args, evaluate=evaluate, **kwargs)
        finally:
            for process in busy:
                process.kill()
                process.wait()

    speed_probes.time_network = in_spell


def choices(hp) -> dict:
    """What the configuration chose and timed (``hp``: the resolved HParams, or a job's hparams.json)."""
    choice = hp.network_choice or {}
    return {
        "precision": str(hp.precision),
        "precision_probe": hp.precision_probe,
        "member": choice.get("member"),
        "timed": [c["member"] for c in choice.get("candidates", []) if c["speed"] == "timed"],
        "images_per_sec": {c["member"]: c["images_per_sec"] for c in choice.get("candidates", [])},
        "timed_again": choice.get("timed_again"),
        "speed_probe": hp.speed_probe,
        "filter_gradients": hp.filter_gradients,
    }


def patch_probes(spell=None, hogs=1, undoubted=False) -> None:
    """This process's probes under ``make_spell(spell, hogs)``; ``undoubted``: a doubted timing is not
    timed again (as before it was)."""
    from estimator.training import speed_probes

    if spell:
        make_spell(spell, hogs)
    if undoubted:
        speed_probes.time_again = lambda hp, first, *_, **__: dict(first)


def resolve_seconds(argv) -> dict:
    """In this process: seconds ``config.parse(argv)`` takes (TensorFlow imported before), and its choices."""
    from estimator.training import config

    start = time.perf_counter()
    hp, _ = config.parse(argv)
    return {"seconds": round(time.perf_counter() - start, 2), **choices(hp)}


def startup(recipe: str, data_dir: str, cache: str, spell_flags=(), whole_job=False) -> dict:
    """``resolve_seconds`` of ``recipe`` in a fresh process with ``--probe-cache cache``; ``whole_job``:
    the job itself instead, to its end (its results.json, wall seconds and choices)."""
    with tempfile.TemporaryDirectory() as job:
        argv = ["@" + os.path.join(REPO, "estimator", "recipes", recipe + ".args"), "--data-dir", data_dir]
        argv += ["--job-dir", job, "--probe-cache", cache]
        mode = "--job" if whole_job else "--resolve"
        command = [sys.executable, "-m", "benchmarks.probe_cost", mode, *spell_flags, "--"] + argv
        start = time.perf_counter()
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
        if not whole_job:
            return json.loads(out.strip().splitlines()[-1])
        from estimator.common import storage
        from estimator.training.hparams import HParams

        recorded = json.loads(storage.read_text(os.path.join(job, "hparams.json")))["hparams"]
        results = json.loads(storage.read_text(os.path.join(job, "results.json")))
        return {
            "wall_seconds": round(time.perf_counter() - start, 1),
            **{key: results[key] for key in ("accuracy", "global_step", "train_seconds")},
            **choices(HParams.from_dict(recorded)),
        }


def spells(recipe: str, data_dir: str, hogs: int, targets=SPELLS, whole_jobs=False):
    """First runs of ``recipe`` with each of ``targets`` (``CALM``: none), its doubts timed again and not
    (yielded as they end); ``whole_jobs``: each a whole job, to the end of its budget."""
    for target in targets:
        for undoubted in (False,) if target == CALM else (False, True):
            flags = [] if target == CALM else ["--spell", target, "--hogs", str(hogs)]
            with tempfile.TemporaryDirectory() as cache:
                run = startup(recipe, data_dir, cache, flags + (["--undoubted"] if undoubted else []), whole_jobs)
            if undoubted and run["timed_again"]:
                run["timed_again"] = "(not timed again) " + run["timed_again"]
            hogs_beside = 0 if target == CALM else hogs
            yield dict(run, recipe=recipe, spell=target, hogs=hogs_beside, timed_again_allowed=not undoubted)


def member_speeds(data_dir: str, rounds: int, precisions) -> list:
    """Each member's training and evaluation images/s at batch 512 and at its probe batch, per precision."""
    from estimator.networks import family
    from estimator.training import config, speed_probes

    with tempfile.TemporaryDirectory() as job:
        argv = ["--data-dir", data_dir, "--job-dir", job, "--num-gpus", "0", "--network", "airbench"]
        hp, _ = config.parse(argv + ["--train-batch-size", "512", "--eval-batch-size", "500"])
    rows = []
    for name in precisions:
        best = {}
        for _ in range(rounds):
            for m in family.MEMBERS:
                shape = hp.replace(group_depth=m.group_depth, width_multiplier=m.width_multiplier)
                for batch in sorted({512, family.probe_batch(m.name, 512)}):
                    rate = speed_probes.time_network(shape.replace(train_batch_size=batch), name, max_secs=None)
                    old = best.get((m.name, batch), (0.0, 0.0))
                    best[(m.name, batch)] = (max(old[0], rate["train"]), max(old[1], rate["eval"]))
        reference = family.member(family.REFERENCE)
        ref_rate = best[(reference.name, 512)][0] * reference.forward_mflops
        for m in family.MEMBERS:
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


def spells_table(args) -> list:
    """``spells`` of each recipe as ``args`` asks: printed as they end, and their rows."""
    rows = []
    # A configuration's seconds, or a whole job's wall seconds, steps and accuracy.
    outcome = ("wall s", "steps", "accuracy") if args.whole_jobs else ("first s",)
    print(
        ("\n%-10s %-10s %-8s" + " %8s" * len(outcome) + "  %-18s %-16s %s")
        % ("recipe", "spell", "again", *outcome, "chosen", "precision probe", "doubt")
    )
    for recipe in args.recipes:
        for row in spells(recipe, args.data_dir, args.spells, args.spell_on, args.whole_jobs):
            rows.append(row)
            figures = (
                ("%8.1f" % row["wall_seconds"], "%8d" % row["global_step"], "%8.4f" % row["accuracy"])
                if args.whole_jobs
                else ("%8.1f" % row["seconds"],)
            )
            print(
                "%-10s %-10s %-8s %s  %-18s %-16s %s"
                % (
                    recipe,
                    row["spell"],
                    "yes" if row["timed_again_allowed"] else "no",
                    " ".join(figures),
                    "%s (%s)" % (row["member"], row["precision"]),
                    json.dumps(row["precision_probe"]),
                    row["timed_again"] or "-",
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
    parser.add_argument(
        "--spells",
        type=int,
        default=0,
        metavar="HOGS",
        help="Also first runs with HOGS busy processes beside the reference's first timing, then the member's "
        "(a VM's slow spell), each with its doubt timed again and not.",
    )
    parser.add_argument(
        "--spell-on",
        nargs="+",
        default=list(SPELLS),
        choices=(CALM,) + SPELLS,
        help="The spells' targets (%s: a first run without one, beside them)." % CALM,
    )
    parser.add_argument(
        "--whole-jobs",
        action="store_true",
        help="Each spelled first run is the whole job, to the end of its budget: its accuracy and steps too.",
    )
    parser.add_argument("--out", default="benchmarks/results/probe_cost.json")
    args = parser.parse_args(argv)
    from estimator.common.machine import cpu_info, native_bf16

    print_machine()
    result = {"startup": startup_table(args.recipes, args.data_dir, args.rounds), "members": []}
    if args.spells:
        result["spells"] = spells_table(args)
    if not args.skip_members:
        precisions = ["fp32", "bf16"] if native_bf16(cpu_info()) else ["fp32"]
        result["members"] = members_table(member_speeds(args.data_dir, args.rounds, precisions))
    write_result(args.out, result)
    print("\nwrote", args.out)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] in (["--resolve"], ["--job"]):
        split = sys.argv.index("--")
        spell_parser = argparse.ArgumentParser()
        spell_parser.add_argument("--spell", choices=SPELLS)
        spell_parser.add_argument("--hogs", type=int, default=1)
        spell_parser.add_argument("--undoubted", action="store_true")
        patch_probes(**vars(spell_parser.parse_args(sys.argv[2:split])))
        if sys.argv[1] == "--job":
            from estimator import cifar10_main

            sys.exit(cifar10_main.main(sys.argv[split + 1 :]))
        print(json.dumps(resolve_seconds(sys.argv[split + 1 :])))
        sys.exit(0)
    sys.exit(main())
