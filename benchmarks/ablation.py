"""What each short-run option buys: one recipe run with each option added, side by side in one session.

    python -m benchmarks.ablation --data-dir work/cifar-10-full recipes/cpu_5min.args \\
        --variant base= --variant lookahead=--lookahead --variant pad2="--crop-padding 2"

Each variant is the recipe plus its flags (later flags override the recipe's),
run as a user would (``benchmarks.recipes.run_recipe``: a fresh process, wall
time of the whole command). Prints a table with the gain of each variant over
the first, and writes JSON with the CPU.
"""

import argparse
import os
import shlex
import tempfile

from benchmarks.common import print_machine, stop_trainers_on_sigterm, write_result
from benchmarks.recipes import run_recipe


def parse_variant(text: str):
    name, _, flags = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError("%r: write NAME=FLAGS, e.g. pad2='--crop-padding 2'" % text)
    return name, shlex.split(flags)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recipe", help="A flag file under recipes/.")
    parser.add_argument("--data-dir", required=True, help="TFRecords of the full data set.")
    parser.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        required=True,
        help="NAME=FLAGS; the first is the baseline the others are compared with.",
    )
    parser.add_argument("--job-root", default=None)
    parser.add_argument("--out", default="benchmarks/results/ablation_cpu_5min.json")
    args = parser.parse_args(argv)
    stop_trainers_on_sigterm()
    print_machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in args.variant:
            job = os.path.join(args.job_root or tmp, name)
            row = dict(
                run_recipe(os.path.abspath(args.recipe), os.path.abspath(args.data_dir), job, flags), variant=name
            )
            rows.append(row)
            base = rows[0]
            print(
                "%-14s %-5s steps %5d  wall %6.1f s  test %.4f (%+.2f)  flip %.4f  tta %s  %s"
                % (
                    name,
                    row["precision"],
                    row["global_step"],
                    row["wall_seconds"],
                    row["accuracy"],
                    100 * (row["accuracy"] - base["accuracy"]),
                    row.get("accuracy_flip_tta", float("nan")),
                    "%.4f" % row["accuracy_tta"] if "accuracy_tta" in row else "-",
                    " ".join(flags),
                ),
                flush=True,
            )
            write_result(args.out, {"recipe": args.recipe, "data_dir": args.data_dir, "runs": rows})


if __name__ == "__main__":
    main()
