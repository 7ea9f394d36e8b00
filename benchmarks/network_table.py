"""``--network auto``'s table: each member of the family trained for fixed numbers of epochs, test accuracy.

    python -m benchmarks.network_table --data-dir work/cifar-10-full \\
        --runs "airbench94 x0.5=1,2,4,8,16" "airbench94=1,2,4,8" "airbench96=8,16" [-- --optimizer muon]

Each run is the recipe's training (recipes/cpu_5min.args for airbench94's members, cpu_30min.args for
airbench96's: their flags without ``--time-budget``, plus ``--train-epochs E`` and the member's
network and augmentation flags, then any flags after ``--``), in a fresh trainer process, the test accuracy
of its last step. The table in ``estimator.networks.family`` is this benchmark's JSON. Accuracy against
epochs depends on the training, not on the CPU: runs in bf16 where it is native are as good as fp32 ones, and faster.
"""

import argparse
import os
import shlex
import sys
import tempfile

from benchmarks.common import print_machine, stop_trainers_on_sigterm, write_result
from benchmarks.recipes import run_recipe
from estimator.common import processes

RECIPE_OF_DEPTH = {2: "recipes/cpu_5min.args", 3: "recipes/cpu_30min.args"}


# What the runs drop of a recipe: they train fixed epochs (with SGD unless the flags after -- say otherwise: the
# budget's --optimizer auto has no budget here), and evaluate without the test-time views.
DROPPED = ("--time-budget", "--tta-fraction", "--optimizer")


def recipe_without_budget(recipe: str, directory: str) -> str:
    """A copy of ``recipe`` without its ``DROPPED`` flags."""
    with open(recipe) as f:
        words = shlex.split(f.read(), comments=True)
    kept = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in DROPPED:
            skip = True
        elif not word.startswith(tuple(flag + "=" for flag in DROPPED)):
            kept.append(word)
    path = os.path.join(directory, os.path.basename(recipe))
    with open(path, "w") as f:
        f.write(" ".join(shlex.quote(w) for w in kept) + "\n")
    return path


def parse_runs(text: str):
    name, _, epochs = text.partition("=")
    try:
        return name, [float(e) for e in epochs.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("%r: write MEMBER=E1,E2,... e.g. 'airbench94=1,2,4'" % text) from None


def main(argv=None):
    from estimator.budget import family

    members = {m.name: m for m in family.MEMBERS}
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--runs", type=parse_runs, nargs="+", required=True, help="MEMBER=E1,E2,...")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--job-root", default=None)
    parser.add_argument("--out", default="benchmarks/results/network_table.json")
    own, extra = processes.split_argv(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(own)
    unknown = [name for name, _ in args.runs if name not in members]
    if unknown:
        parser.error("unknown members %s: the family's are %s" % (unknown, ", ".join(members)))
    stop_trainers_on_sigterm()
    print_machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, epochs in args.runs:
            member = members[name]
            recipe = recipe_without_budget(RECIPE_OF_DEPTH[member.group_depth], tmp)
            for e in epochs:
                job = os.path.join(args.job_root or tmp, "%s-%g" % (name.replace(" ", "_"), e))
                flags = member.flags() + ["--train-epochs", "%g" % e, "--precision", args.precision]
                flags += ["--no-eval-tta", "--no-eval-flip-tta", "--export", "false"] + extra
                row = run_recipe(recipe, os.path.abspath(args.data_dir), job, flags)
                rows.append(
                    dict(
                        member=name,
                        epochs=e,
                        extra_flags=extra,
                        **{
                            k: row[k]
                            for k in ("accuracy", "global_step", "wall_seconds", "precision", "examples_per_sec")
                        },
                    )
                )
                print(
                    "%-18s %5g epochs  steps %5d  %-5s  %7.1f s  test %.4f  %s"
                    % (
                        name,
                        e,
                        row["global_step"],
                        row["precision"],
                        row["wall_seconds"],
                        row["accuracy"],
                        " ".join(extra),
                    ),
                    flush=True,
                )
                write_result(args.out, {"rows": rows})


if __name__ == "__main__":
    main()
