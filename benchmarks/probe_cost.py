"""What a first run pays for its speed probes, and the figures ``--network auto`` estimates members by.

    python -m benchmarks.probe_cost --data-dir work/cifar-10-full
    ONEDNN_MAX_CPU_ISA=AVX2 python -m benchmarks.probe_cost --data-dir D --out benchmarks/results/probe_cost_avx2.json

Start-up: for each recipe, the configuration (``estimator.training.config.parse``: the data checked, the
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


SPELLS = ("reference", "member")


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


def resolve_seconds(argv, spell=None, hogs=1, undoubted=False) -> dict:
    """In this process: seconds ``config.parse(argv)`` takes (TensorFlow imported before), and its choices.
    ``spell``: ``make_spell``'s; ``undoubted``: a doubted timing is not timed again (as before it was)."""
    from estimator.training import config, speed_probes

    if spell:
        make_spell(spell, hogs)
    if undoubted:
        speed_probes.time_again = lambda hp, first, *_, **__: dict(first)
    start = time.perf_counter()
    hp, _ = config.parse(argv)
    seconds = time.perf_counter() - start
    choice = hp.network_choice or {}
    return {
        "seconds": round(seconds, 2),
        "precision": str(hp.precision),
        "precision_probe": hp.precision_probe,
        "member": choice.get("member"),
        "timed": [c["member"] for c in choice.get("candidates", []) if c["speed"] == "timed"],
        "images_per_sec": {c["member"]: c["images_per_sec"] for c in choice.get("candidates", [])},
        "timed_again": choice.get("timed_again")
        and ("(not timed again) " if undoubted else "") + choice["timed_again"],
        "speed_probe": hp.speed_probe,
        "filter_gradients": hp.filter_gradients,
    }


def startup(recipe: str, data_dir: str, cache: str, spell_flags=()) -> dict:
    """``resolve_seconds`` of ``recipe`` in a fresh process with ``--probe-cache cache``."""
    with tempfile.TemporaryDirectory() as job:
        argv = ["@" + os.path.join(REPO, "estimator", "recipes", recipe + ".args"), "--data-dir", data_dir]
        argv += ["--job-dir", job, "--probe-cache", cache]
        command = [sys.executable, "-m", "benchmarks.probe_cost", "--resolve", *spell_flags, "--"] + argv
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def spells(recipe: str, data_dir: str, hogs: int):
    """First runs of ``recipe`` with each of ``SPELLS``, its doubts timed again and not (yielded as they end)."""
    for target in SPELLS:
        for undoubted in (False, True):
            flags = ["--spell", target, "--hogs", str(hogs)] + (["--undoubted"] if undoubted else [])
            with tempfile.TemporaryDirectory() as cache:
                run = startup(recipe, data_dir, cache, flags)
            yield dict(run, recipe=recipe, spell=target, hogs=hogs, timed_again_allowed=not undoubted)


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
    parser.add_argument("--out", default="benchmarks/results/probe_cost.json")
    args = parser.parse_args(argv)
    from estimator.common.machine import cpu_info, native_bf16

    print_machine()
    result = {"startup": [], "members": []}
    print(
        "\n%-10s %-6s %10s %10s %6s  %-18s %s" % ("recipe", "round", "first s", "cached s", "more", "chosen", "timed")
    )
    for recipe in args.recipes:
        for round_ in range(args.rounds):
            with tempfile.TemporaryDirectory() as cache:
                first = startup(recipe, args.data_dir, cache)
                cached = startup(recipe, args.data_dir, cache)
            row = {"recipe": recipe, "round": round_ + 1, "first": first, "cached": cached}
            row["first_run_more_secs"] = round(first["seconds"] - cached["seconds"], 2)
            result["startup"].append(row)
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
    if args.spells:
        print(
            "\n%-10s %-10s %-8s %8s  %-18s %-16s %s"
            % ("recipe", "spell", "again", "first s", "chosen", "precision probe", "doubt")
        )
        for recipe in args.recipes:
            for row in spells(recipe, args.data_dir, args.spells):
                result.setdefault("spells", []).append(row)
                print(
                    "%-10s %-10s %-8s %8.1f  %-18s %-16s %s"
                    % (
                        recipe,
                        row["spell"],
                        "yes" if row["timed_again_allowed"] else "no",
                        row["seconds"],
                        "%s (%s)" % (row["member"], row["precision"]),
                        json.dumps(row["precision_probe"]),
                        row["timed_again"] or "-",
                    )
                )
    if not args.skip_members:
        precisions = ["fp32", "bf16"] if native_bf16(cpu_info()) else ["fp32"]
        result["members"] = member_speeds(args.data_dir, args.rounds, precisions)
        print(
            "\n%-9s %-18s %10s %10s %10s %8s %12s"
            % ("precision", "member", "train 512", "eval 500", "efficiency", "probe b", "train probe")
        )
        for r in result["members"]:
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
    write_result(args.out, result)
    print("\nwrote", args.out)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--resolve"]:
        split = sys.argv.index("--")
        spell_parser = argparse.ArgumentParser()
        spell_parser.add_argument("--spell", choices=SPELLS)
        spell_parser.add_argument("--hogs", type=int, default=1)
        spell_parser.add_argument("--undoubted", action="store_true")
        spell_args = spell_parser.parse_args(sys.argv[2:split])
        print(json.dumps(resolve_seconds(sys.argv[split + 1 :], **vars(spell_args))))
        sys.exit(0)
    sys.exit(main())
