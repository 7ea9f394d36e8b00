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
import base64
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from estimator import cifar10_format as fmt  # noqa: E402

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class InputError(ValueError):
    """A file given to predict cannot be used; the message names it."""


def read_image_file(path: str, notes: set) -> bytes:
    """The file's bytes, checked to be a PNG or JPEG image; notes channel conversions once."""
    import tensorflow as tf

    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise InputError("%s is empty: expected a PNG or JPEG image." % path)
    try:
        image = tf.io.decode_image(data, channels=0, expand_animations=False)
    except (tf.errors.InvalidArgumentError, ValueError):
        raise InputError("%s is not a PNG or JPEG image the model can read." % path) from None
    channels = int(image.shape[-1])
    if channels in (1, 2):
        notes.add("grayscale images were converted to RGB")
    elif channels == 4:
        notes.add("the alpha channel of RGBA images was dropped")
    if tuple(image.shape[:2]) != (fmt.HEIGHT, fmt.WIDTH):
        notes.add("images that are not 32x32 were resized to 32x32")
    return data


def read_npy(path: str) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError("%s is not a readable .npy array (%s)." % (path, e)) from None
    if array.shape == (fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH):
        array = array[None]
    if array.ndim != 4 or array.shape[1:] != (fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH):
        raise InputError("%s has shape %s: expected [32, 32, 3] or [N, 32, 32, 3] RGB values 0..255."
                         % (path, array.shape))
    return array.astype(np.float32)


def load_model(model_dir: str):
    """The loaded SavedModel's two signatures: (image_bytes fn, images fn)."""
    import tensorflow as tf

    from estimator.serving import signatures

    loaded = tf.saved_model.load(signatures.find_saved_model(model_dir))
    sigs = loaded.signatures
    missing = {signatures.DEFAULT_SIGNATURE, signatures.IMAGES_SIGNATURE} - set(sigs)
    if missing:
        raise InputError("%s lacks the signature(s) %s: export it with python -m estimator.export."
                         % (model_dir, ", ".join(sorted(missing))))
    return loaded, sigs[signatures.DEFAULT_SIGNATURE], sigs[signatures.IMAGES_SIGNATURE]


def top_k_line(name: str, probabilities, k: int) -> str:
    order = np.argsort(-probabilities)[:k]
    return "%s: %s" % (name, ", ".join("%s %.3f" % (fmt.CLASS_NAMES[i], probabilities[i]) for i in order))


def predict_files(model_dir: str, files, k: int, as_json: bool, out=sys.stdout, err=sys.stderr) -> None:
    import tensorflow as tf

    notes = set()
    images, arrays = [], []
    for path in files:
        lower = path.lower()
        if not os.path.isfile(path):
            raise InputError("%s does not exist." % path)
        if lower.endswith(".npy"):
            arrays.append((path, read_npy(path)))
        elif lower.endswith(IMAGE_SUFFIXES):
            images.append((path, read_image_file(path, notes)))
        else:
            raise InputError("%s: expected a .png, .jpg, .jpeg or .npy file." % path)
    _, by_bytes, by_images = load_model(model_dir)
    for note in sorted(notes):
        print("note: %s" % note, file=err)
    rows = []
    if images:
        result = by_bytes(image_bytes=tf.constant([data for _, data in images]))
        rows += [(path, None, p) for (path, _), p in zip(images, result["probabilities"].numpy())]
    for path, array in arrays:
        result = by_images(images=tf.constant(array))
        rows += [(path, i, p) for i, p in enumerate(result["probabilities"].numpy())]
    for path, index, probabilities in rows:
        class_id = int(np.argmax(probabilities))
        if as_json:
            row = {"file": path, "class_id": class_id, "class": fmt.CLASS_NAMES[class_id],
                   "probabilities": [float(x) for x in probabilities]}
            if index is not None:
                row["index"] = index
            print(json.dumps(row), file=out)
        else:
            print(top_k_line(path if index is None else "%s[%d]" % (path, index), probabilities, k), file=out)


def confusion_matrix(labels, predicted) -> np.ndarray:
    matrix = np.zeros((fmt.NUM_CLASSES, fmt.NUM_CLASSES), np.int64)
    np.add.at(matrix, (labels, predicted), 1)
    return matrix


def save_confusion_png(matrix: np.ndarray, path: str, title: str) -> None:
    """The same picture the trainer puts in TensorBoard after each evaluation."""
    from estimator.health import pictures

    with open(path, "wb") as f:
        f.write(pictures.confusion_png(matrix, title))


def score_records(model_dir: str, records: str, batch_size: int = 500):
    """(labels, predicted classes) of every record in ``records``."""
    import tensorflow as tf

    from estimator.cifar10 import decode

    if not os.path.isfile(records):
        raise InputError("%s does not exist: pass a file written by generate_cifar10_tfrecords.py." % records)
    _, _, by_images = load_model(model_dir)
    labels, predicted = [], []
    try:
        for batch in tf.data.TFRecordDataset([records]).batch(batch_size):
            images, batch_labels = decode(batch)
            result = by_images(images=tf.cast(images, tf.float32))
            predicted.append(result["classes"].numpy())
            labels.append(batch_labels.numpy())
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        raise InputError("%s is not a readable CIFAR-10 TFRecord file (%s)." % (records, e.message)) from None
    return np.concatenate(labels), np.concatenate(predicted)


def vertex_request(files) -> dict:
    """The body of ``gcloud ai endpoints predict --json-request`` (and TF Serving's REST API)."""
    instances = []
    for path in files:
        read_image_file(path, set())
        with open(path, "rb") as f:
            instances.append({"image_bytes": {"b64": base64.b64encode(f.read()).decode("ascii")}})
    return {"instances": instances}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m estimator.predict", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="PNG/JPEG images or .npy arrays.")
    parser.add_argument("--model", help="A SavedModel, or a directory of timestamped exports (newest used).")
    parser.add_argument("--records", help="Score a TFRecord split (e.g. DATA_DIR/eval.tfrecords).")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="One JSON object per line.")
    parser.add_argument("--confusion-matrix", default="confusion_matrix.png",
                        help="With --records: where to save the confusion matrix picture.")
    parser.add_argument("--vertex-request", action="store_true",
                        help="Print a Vertex AI / TF Serving JSON request for the image files instead.")
    args = parser.parse_args(argv)
    try:
        if args.vertex_request:
            if not args.files:
                parser.error("--vertex-request needs image files.")
            print(json.dumps(vertex_request(args.files)))
            return 0
        if not args.model:
            parser.error("--model DIR is required (an export such as JOB_DIR/export/best).")
        if bool(args.files) == bool(args.records):
            parser.error("give image/.npy files or --records FILE (one of the two).")
        if not 1 <= args.top_k <= fmt.NUM_CLASSES:
            parser.error("--top-k %d must be in 1..%d." % (args.top_k, fmt.NUM_CLASSES))
        if args.files:
            predict_files(args.model, args.files, args.top_k, args.json)
            return 0
        labels, predicted = score_records(args.model, args.records)
        accuracy = float(np.mean(labels == predicted))
        matrix = confusion_matrix(labels, predicted)
        save_confusion_png(matrix, args.confusion_matrix, "%s: accuracy %.4f" % (args.records, accuracy))
        if args.json:
            print(json.dumps({"records": args.records, "examples": int(labels.size), "accuracy": accuracy}))
        else:
            print("%s: %d examples, accuracy %.4f" % (args.records, labels.size, accuracy))
            print("confusion matrix (rows: true class, columns: predicted)")
            print("%-11s" % "" + " ".join("%6s" % name[:6] for name in fmt.CLASS_NAMES))
            for name, row in zip(fmt.CLASS_NAMES, matrix):
                print("%-11s" % name + " ".join("%6d" % n for n in row))
            print("saved %s" % args.confusion_matrix)
        return 0
    except (InputError, FileNotFoundError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
