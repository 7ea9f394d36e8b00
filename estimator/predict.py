"""Command line: ``python -m estimator.predict --model DIR FILE...``: what is in these pictures?

    python -m estimator.predict --model JOB/export/best cat.png dog.jpg
    python -m estimator.predict --model JOB/export/best batch.npy --json
    python -m estimator.predict --model JOB/export/best --records DATA/eval.tfrecords
    python -m estimator.predict --vertex-request cat.png > request.json

Loads the SavedModel in this process (``tf.saved_model.load``), not the
trainer's graph. ``--model`` is a SavedModel or a directory of timestamped
exports (the newest is used).

* PNG/JPEG files go through the ``serving_default`` signature (``image_bytes``),
  as a served model receives them; ``.npy`` arrays (``[32, 32, 3]`` or
  ``[N, 32, 32, 3]``, values 0..255) through the ``images`` signature.
  Prints the top-k classes per image; with ``--json`` one object per image:
  ``{"file", "index" (for .npy), "class_id", "class", "probabilities"}``.
* ``--records`` scores a whole TFRecord split: accuracy and the confusion
  matrix, printed and saved as a PNG; ``--json`` prints
  ``{"records", "examples", "accuracy"}``.
* ``--vertex-request FILE...`` prints the JSON body of a Vertex AI (or TF
  Serving REST) request for the files, and needs no model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from estimator.common import logs, processes  # noqa: E402

logs.quiet_imports()

with processes.imports_uncollected():
    import numpy as np

    from estimator.data import records as fmt
    from estimator.serving.predictor import (
        InputError,
        confusion_matrix,
        predict_files,
        save_confusion_png,
        score_records,
        top_k_line,
        vertex_request,
    )


def print_predictions(rows, k: int, as_json: bool, out=sys.stdout) -> None:
    for path, index, probabilities in rows:
        class_id = int(np.argmax(probabilities))
        if as_json:
            row = {
                "file": path,
                "class_id": class_id,
                "class": fmt.CLASS_NAMES[class_id],
                "probabilities": [float(x) for x in probabilities],
            }
            if index is not None:
                row["index"] = index
            print(json.dumps(row), file=out)
        else:
            print(top_k_line(path if index is None else "%s[%d]" % (path, index), probabilities, k), file=out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m estimator.predict", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="PNG/JPEG images or .npy arrays.")
    parser.add_argument("--model", help="A SavedModel, or a directory of timestamped exports (newest used).")
    parser.add_argument("--records", help="Score a TFRecord split (e.g. DATA_DIR/eval.tfrecords).")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="One JSON object per line.")
    parser.add_argument(
        "--confusion-matrix",
        default="confusion_matrix.png",
        help="With --records: where to save the confusion matrix picture.",
    )
    parser.add_argument(
        "--vertex-request",
        action="store_true",
        help="Print a Vertex AI / TF Serving JSON request for the image files instead.",
    )
    return parser


def _check_args(parser: argparse.ArgumentParser, args) -> None:
    """Exits with status 2 and one line (argparse's) on a combination that cannot run."""
    if args.vertex_request:
        if not args.files:
            parser.error("--vertex-request needs image files.")
        return
    if not args.model:
        parser.error("--model DIR is required (an export such as JOB_DIR/export/best).")
    if bool(args.files) == bool(args.records):
        parser.error("give image/.npy files or --records FILE (one of the two).")
    if not 1 <= args.top_k <= fmt.NUM_CLASSES:
        parser.error("--top-k %d must be in 1..%d." % (args.top_k, fmt.NUM_CLASSES))


def _report_records(model: str, records: str, picture: str, as_json: bool) -> None:
    """Scores a TFRecord split: prints its accuracy (and, without ``as_json``, the confusion matrix) and
    saves the matrix as a picture."""
    labels, predicted = score_records(model, records)
    accuracy = float(np.mean(labels == predicted))
    matrix = confusion_matrix(labels, predicted)
    save_confusion_png(matrix, picture, "%s: accuracy %.4f" % (records, accuracy))
    if as_json:
        print(json.dumps({"records": records, "examples": int(labels.size), "accuracy": accuracy}))
        return
    print("%s: %d examples, accuracy %.4f" % (records, labels.size, accuracy))
    print("confusion matrix (rows: true class, columns: predicted)")
    print("%-11s" % "" + " ".join("%6s" % name[:6] for name in fmt.CLASS_NAMES))
    for name, row in zip(fmt.CLASS_NAMES, matrix):
        print("%-11s" % name + " ".join("%6d" % n for n in row))
    print("saved %s" % picture)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    try:
        if args.vertex_request:
            print(json.dumps(vertex_request(args.files)))
        elif args.files:
            rows, notes = predict_files(args.model, args.files)
            for note in sorted(notes):
                print("note: %s" % note, file=sys.stderr)
            print_predictions(rows, args.top_k, args.json)
        else:
            _report_records(args.model, args.records, args.confusion_matrix, args.json)
        return 0
    except (InputError, FileNotFoundError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    processes.exit_with(main())
