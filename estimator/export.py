"""Command line: ``python -m estimator.export --job-dir J [--checkpoint PATH] --output DIR``.

Writes a SavedModel (see ``estimator.serving.signatures``) of a checkpoint of
job ``J``: its latest by default. The network is rebuilt from the job's
``hparams.json``; the export is float32 whatever precision trained it.
``DIR`` must not exist; a failed export leaves nothing there.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from estimator.common import logs, processes  # noqa: E402

logs.quiet_imports()

with processes.imports_uncollected():
    from estimator.networks import registry
    from estimator.serving import signatures
    from estimator.training import config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m estimator.export", description=__doc__.split("\n")[0])
    parser.add_argument("--job-dir", required=True, help="The training job's directory (has hparams.json).")
    parser.add_argument("--checkpoint", default=None, help="Checkpoint prefix; default the job's latest.")
    parser.add_argument("--output", required=True, help="Directory to create for the SavedModel.")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        hp = config.load(args.job_dir)
        checkpoint = signatures.resolve_checkpoint(args.job_dir, args.checkpoint)
        path = signatures.export_saved_model(checkpoint, args.output, hp)
    except (FileNotFoundError, FileExistsError, ValueError, signatures.CheckpointMismatchError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    print("Exported %s (%s) to %s" % (checkpoint, registry.describe(hp), path))
    return 0


if __name__ == "__main__":
    processes.exit_with(main())
