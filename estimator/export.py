"""Command line: ``python -m estimator.export --job-dir J [--checkpoint PATH] --output DIR``.

Writes a SavedModel (see ``estimator.serving.signatures``) of a checkpoint of
job ``J``: its latest by default. The network is rebuilt from the job's
``hparams.json``; the export is float32 whatever precision trained it.
``DIR`` must not exist; a failed export leaves nothing there.
"""

import argparse
import dataclasses
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from estimator import storage  # noqa: E402
from estimator.hparams import HParams  # noqa: E402
from estimator.serving import signatures  # noqa: E402


def job_hparams(job_dir: str) -> HParams:
    """The HParams a job recorded in its hparams.json.

    Raises:
      FileNotFoundError: the job dir has no hparams.json.
    """
    path = storage.join(job_dir, "hparams.json")
    if not storage.exists(path):
        raise FileNotFoundError("%s not found: --job-dir must be a directory that "
                                "python -m estimator.cifar10_main trained into." % path)
    recorded = json.loads(storage.read_text(path))["hparams"]
    known = {f.name for f in dataclasses.fields(HParams)}
    return HParams(**{k: v for k, v in recorded.items() if k in known})


def resolve_checkpoint(job_dir: str, checkpoint=None) -> str:
    """``checkpoint`` (a prefix such as JOB/model.ckpt-400), else the job's latest."""
    if checkpoint:
        if not tf.io.gfile.exists(checkpoint + ".index"):
            raise FileNotFoundError("%s is not a checkpoint (no %s.index): pass a prefix such as "
                                    "%s/model.ckpt-1000." % (checkpoint, checkpoint, job_dir))
        return checkpoint
    latest = tf.train.latest_checkpoint(job_dir)
    if latest is None:
        raise FileNotFoundError("%s holds no checkpoint yet: train first, or pass --checkpoint." % job_dir)
    return latest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m estimator.export", description=__doc__.split("\n")[0])
    parser.add_argument("--job-dir", required=True, help="The training job's directory (has hparams.json).")
    parser.add_argument("--checkpoint", default=None, help="Checkpoint prefix; default the job's latest.")
    parser.add_argument("--output", required=True, help="Directory to create for the SavedModel.")
    args = parser.parse_args(argv)
    try:
        hp = job_hparams(args.job_dir)
        checkpoint = resolve_checkpoint(args.job_dir, args.checkpoint)
        path = signatures.export_saved_model(checkpoint, args.output, hp)
    except (FileNotFoundError, FileExistsError, signatures.CheckpointMismatchError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    print("Exported %s (ResNet-%d %s) to %s" % (checkpoint, hp.num_layers, hp.resnet_version, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
