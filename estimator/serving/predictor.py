"""Predictions of an exported SavedModel, loaded in this process (``tf.saved_model.load``).

The library behind ``python -m estimator.predict``: reads PNG/JPEG files (the
``serving_default`` signature, as a served model receives them) and ``.npy``
arrays (the ``images`` signature), scores TFRecord splits, and builds Vertex AI
request bodies.
"""

from __future__ import annotations

import base64

import numpy as np

from estimator.data import records as fmt

# TensorFlow and the serving graph are imported where used: ``python -m estimator.predict`` answers --help and bad
# flags before their import (seconds).

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class InputError(ValueError):
    """A file given to predict cannot be used; the message names it."""


def is_file(path: str) -> bool:
    """Whether PATH, local or gs:// (TensorFlow's file system: the records and exports of a cloud job), is a file."""
    import tensorflow as tf

    return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)


def read_image_file(path: str, notes: set) -> bytes:
    """The file's bytes, checked to be a PNG or JPEG image; notes channel conversions once."""
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
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
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            array = np.load(f, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError("%s is not a readable .npy array (%s)." % (path, e)) from None
    if array.shape == (fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH):
        array = array[None]
    if array.ndim != 4 or array.shape[1:] != (fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH):
        raise InputError(
            "%s has shape %s: expected [32, 32, 3] or [N, 32, 32, 3] RGB values 0..255." % (path, array.shape)
        )
    return array.astype(np.float32)


def load_model(model_dir: str):
    """The loaded SavedModel's two signatures: (image_bytes fn, images fn)."""
    import tensorflow as tf

    from estimator.serving import signatures

    loaded = tf.saved_model.load(signatures.find_saved_model(model_dir))
    sigs = loaded.signatures
    missing = {signatures.DEFAULT_SIGNATURE, signatures.IMAGES_SIGNATURE} - set(sigs)
    if missing:
        raise InputError("%s lacks the signature(s) %s: export it again." % (model_dir, ", ".join(sorted(missing))))
    return loaded, sigs[signatures.DEFAULT_SIGNATURE], sigs[signatures.IMAGES_SIGNATURE]


def top_k_line(name: str, probabilities, k: int) -> str:
    order = np.argsort(-probabilities)[:k]
    return "%s: %s" % (name, ", ".join("%s %.3f" % (fmt.CLASS_NAMES[i], probabilities[i]) for i in order))


def predict_files(model_dir: str, files):
    """Class probabilities of each image file and each image of each ``.npy`` array.

    Returns:
      ``(rows, notes)``: rows ``(file, index within a .npy or None, probabilities)``; notes on
      conversions made (grayscale, alpha, size), each said once.
    """
    import tensorflow as tf

    notes = set()
    images, arrays = [], []
    for path in files:
        lower = path.lower()
        if not is_file(path):
            raise InputError("%s does not exist." % path)
        if lower.endswith(".npy"):
            arrays.append((path, read_npy(path)))
        elif lower.endswith(IMAGE_SUFFIXES):
            images.append((path, read_image_file(path, notes)))
        else:
            raise InputError("%s: expected a .png, .jpg, .jpeg or .npy file." % path)
    _, by_bytes, by_images = load_model(model_dir)
    rows = []
    if images:
        result = by_bytes(image_bytes=tf.constant([data for _, data in images]))
        rows += [(path, None, p) for (path, _), p in zip(images, result["probabilities"].numpy())]
    for path, array in arrays:
        result = by_images(images=tf.constant(array))
        rows += [(path, i, p) for i, p in enumerate(result["probabilities"].numpy())]
    return rows, notes


def confusion_matrix(labels, predicted) -> np.ndarray:
    matrix = np.zeros((fmt.NUM_CLASSES, fmt.NUM_CLASSES), np.int64)
    np.add.at(matrix, (labels, predicted), 1)
    return matrix


def save_confusion_png(matrix: np.ndarray, path: str, title: str) -> None:
    """The same picture the trainer puts in TensorBoard after each evaluation."""
    import tensorflow as tf

    from estimator.reporting import pictures

    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(pictures.confusion_png(matrix, title))


def score_records(model_dir: str, records: str, batch_size: int = 500):
    """(labels, predicted classes) of every record in ``records``."""
    import tensorflow as tf

    from estimator.data.pipeline import decode, pipeline_options

    if not is_file(records):
        raise InputError("%s does not exist: pass a file written by generate_cifar10_tfrecords.py." % records)
    _, _, by_images = load_model(model_dir)
    labels, predicted = [], []
    try:
        for batch in tf.data.TFRecordDataset([records]).batch(batch_size).with_options(pipeline_options()):
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
        if not is_file(path):
            raise InputError("%s does not exist." % path)
        data = read_image_file(path, set())
        instances.append({"image_bytes": {"b64": base64.b64encode(data).decode("ascii")}})
    return {"instances": instances}
