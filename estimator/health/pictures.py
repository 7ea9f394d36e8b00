"""Pictures of a run, as PNG bytes (matplotlib, Agg backend) and TensorBoard image summaries.

* ``batch_grid``: a training batch exactly as the network receives it (after
  distortion), each image titled with its class name;
* ``confusion_png``: the validation confusion matrix after each evaluation;
* ``mistakes_png``: the most confidently misclassified validation images;
* ``write_curves``: ``JOB_DIR/curves.png``, the training and validation curves
  read back from the run's own event files at the end of training.
"""

from __future__ import annotations

import io
import os

import numpy as np

from estimator import cifar10_format as fmt


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


def _grid(images, titles, columns: int = 8):
    plt = _pyplot()
    rows = max(1, -(-len(images) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(columns * 1.3, rows * 1.5), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, title in zip(axes.flat, images, titles):
        ax.imshow(np.asarray(image, np.uint8), interpolation="nearest")
        ax.set_title(title, fontsize=7)
    fig.tight_layout()
    return fig


def batch_grid(images, labels) -> bytes:
    """``images`` [N, 32, 32, 3] with values 0..255, ``labels`` [N] class ids."""
    return _png(_grid(images, [fmt.CLASS_NAMES[int(c)] if 0 <= int(c) < 10 else "pad" for c in labels]))


def mistakes_png(images, true, predicted, confidence) -> bytes:
    """Misclassified images titled "true -> predicted (confidence)"; unused slots (confidence < 0) left out."""
    keep = [i for i in range(len(confidence)) if confidence[i] >= 0]
    titles = ["%s->%s %.2f" % (fmt.CLASS_NAMES[int(true[i])], fmt.CLASS_NAMES[int(predicted[i])], confidence[i])
              for i in keep]
    return _png(_grid([images[i] for i in keep], titles)) if keep else b""


def confusion_png(matrix, title: str = "") -> bytes:
    """Rows: true class; columns: predicted; each row normalised, counts written in the cells."""
    plt = _pyplot()
    matrix = np.asarray(matrix, np.float64)
    rows = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    ax.imshow(rows, cmap="Blues", vmin=0, vmax=1)
    names = list(fmt.CLASS_NAMES)
    ax.set_xticks(range(10), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(10), names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(10):
        for j in range(10):
            ax.text(j, i, "%d" % matrix[i, j], ha="center", va="center", fontsize=7,
                    color="white" if rows[i, j] > 0.5 else "black")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _png(fig)


def image_summary(tag: str, png: bytes):
    """A v1 ``Summary`` holding one PNG image."""
    import tensorflow as tf

    width, height = _png_size(png)
    image = tf.compat.v1.Summary.Image(encoded_image_string=png, height=height, width=width, colorspace=3)
    return tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag=tag, image=image)])


def _png_size(png: bytes):
    # The IHDR chunk: width and height as big-endian 32-bit integers at bytes 16-24.
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def summary_writer(log_dir: str):
    """The process's v1 ``FileWriter`` for ``log_dir`` (shared with the Estimator's); also
    from eager code, e.g. after ``Estimator.evaluate`` (a v1 writer cannot be created eagerly)."""
    import tensorflow as tf

    if tf.executing_eagerly():
        with tf.Graph().as_default():
            return tf.compat.v1.summary.FileWriterCache.get(log_dir)
    return tf.compat.v1.summary.FileWriterCache.get(log_dir)


def write_image(log_dir: str, tag: str, png: bytes, step: int) -> None:
    writer = summary_writer(log_dir)
    writer.add_summary(image_summary(tag, png), step)
    writer.flush()


def read_scalars(log_dir: str, tags) -> dict:
    """{tag: [(step, value)]} from the event files directly in ``log_dir`` (not its subfolders)."""
    import tensorflow as tf

    found = {t: {} for t in tags}
    pattern = os.path.join(log_dir, "events.out.tfevents.*")
    for path in sorted(tf.io.gfile.glob(pattern)):
        try:
            for event in tf.compat.v1.train.summary_iterator(path):
                for value in event.summary.value:
                    if value.tag in found and value.HasField("simple_value"):
                        found[value.tag][event.step] = value.simple_value
        except tf.errors.DataLossError:
            pass  # a file being written: what was read so far is kept
    return {t: sorted(v.items()) for t, v in found.items()}


def write_curves(job_dir: str, validation_dir: str = "eval_validation") -> str:
    """Plots loss, accuracy and learning rate of a run into ``JOB_DIR/curves.png``; returns its path."""
    from estimator import storage

    plt = _pyplot()
    train = read_scalars(job_dir, ["train/cross_entropy", "train/accuracy", "train/learning_rate", "loss"])
    val = read_scalars(storage.join(job_dir, validation_dir), ["cross_entropy", "accuracy"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("cross-entropy", [("training", train["train/cross_entropy"]), ("validation", val["cross_entropy"])]),
              ("accuracy", [("training batch", train["train/accuracy"]), ("validation", val["accuracy"])]),
              ("learning rate", [("", train["train/learning_rate"])])]
    for ax, (title, series) in zip(axes, panels):
        for label, points in series:
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o" if len(points) < 30 else None, ms=3, label=label or None)
        ax.set_title(title)
        ax.set_xlabel("global step")
        ax.grid(alpha=0.3)
        if any(label for label, points in series if points):
            ax.legend(fontsize=8)
    fig.suptitle(os.path.basename(job_dir.rstrip("/")), fontsize=9)
    fig.tight_layout()
    path = storage.join(job_dir, "curves.png")
    storage.write_bytes(path, _png(fig))
    return path
