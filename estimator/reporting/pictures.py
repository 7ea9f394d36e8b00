"""Pictures of a run, as PNG bytes (matplotlib, Agg backend).

* ``batch_grid``: a training batch exactly as the network receives it (after
  distortion), each image titled with its class name;
* ``confusion_png``: a confusion matrix (after each evaluation; ``predict --records``);
* ``mistakes_png``: the most confidently misclassified validation images;
* ``curves_png``: loss, accuracy and learning rate of a run.

``estimator.reporting.summaries`` puts them into TensorBoard and ``curves.png``.
"""

from __future__ import annotations

import io

import numpy as np

from estimator.data import records as fmt


def figure(**options):
    """A figure without pyplot, which needs no display and keeps no state, and whose import a job skips
    (docs/speed.md)."""
    from matplotlib.figure import Figure

    return Figure(**options)


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)  # Agg, matplotlib's own canvas for PNG
    return buf.getvalue()


def _grid(images, titles, columns: int = 8):
    # One mosaic in one Axes: a subplot per image cost 0.75 s a grid (docs/training.md).
    rows = max(1, -(-len(images) // columns))
    height, width = fmt.HEIGHT + 10, fmt.WIDTH + 4  # room for each title above its image
    mosaic = np.full((rows * height, columns * width, fmt.DEPTH), 255, np.uint8)
    fig = figure(figsize=(columns * 1.3, rows * 1.5))
    ax = fig.subplots()
    ax.axis("off")
    for i, (image, title) in enumerate(zip(images, titles)):
        top, left = (i // columns) * height + 9, (i % columns) * width + 2
        mosaic[top : top + fmt.HEIGHT, left : left + fmt.WIDTH] = np.asarray(image, np.uint8)
        ax.text(left + fmt.WIDTH / 2, top - 1, title, fontsize=7, ha="center", va="bottom")
    ax.imshow(mosaic, interpolation="nearest")
    fig.subplots_adjust(0, 0, 1, 1)
    return fig


def batch_grid(images, labels) -> bytes:
    """``images`` [N, HEIGHT, WIDTH, DEPTH] with values 0..255, ``labels`` [N] class ids."""
    names = [fmt.CLASS_NAMES[int(c)] if 0 <= int(c) < fmt.NUM_CLASSES else "pad" for c in labels]
    return png(_grid(images, names))


def mistakes_png(images, true, predicted, confidence) -> bytes:
    """Misclassified images titled "true -> predicted (confidence)"; unused slots (confidence < 0) left out."""
    keep = [i for i in range(len(confidence)) if confidence[i] >= 0]
    titles = [
        "%s->%s %.2f" % (fmt.CLASS_NAMES[int(true[i])], fmt.CLASS_NAMES[int(predicted[i])], confidence[i]) for i in keep
    ]
    return png(_grid([images[i] for i in keep], titles)) if keep else b""


def confusion_png(matrix, title: str = "") -> bytes:
    """Rows: true class; columns: predicted; each row normalised, counts written in the cells."""
    matrix = np.asarray(matrix, np.float64)
    rows = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    fig = figure(figsize=(6.4, 5.6))
    ax = fig.subplots()
    ax.imshow(rows, cmap="Blues", vmin=0, vmax=1)
    names = list(fmt.CLASS_NAMES)
    ax.set_xticks(range(fmt.NUM_CLASSES), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(fmt.NUM_CLASSES), names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(fmt.NUM_CLASSES):
        for j in range(fmt.NUM_CLASSES):
            ax.text(
                j,
                i,
                "%d" % matrix[i, j],
                ha="center",
                va="center",
                fontsize=7,
                color="white" if rows[i, j] > 0.5 else "black",
            )
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return png(fig)


def curves_png(train: dict, validation: dict, title: str) -> bytes:
    """Three panels (cross-entropy, accuracy, learning rate) against the global step.

    ``train``/``validation``: ``{tag: [(step, value)]}`` as ``summaries.read_scalars`` returns.
    """
    fig = figure(figsize=(13, 3.8))
    axes = fig.subplots(1, 3)
    panels = [
        ("cross-entropy", [("training", train["train/cross_entropy"]), ("validation", validation["cross_entropy"])]),
        ("accuracy", [("training batch", train["train/accuracy"]), ("validation", validation["accuracy"])]),
        ("learning rate", [("", train["train/learning_rate"])]),
    ]
    for ax, (name, series) in zip(axes, panels):
        for label, points in series:
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o" if len(points) < 30 else None, ms=3, label=label or None)
        ax.set_title(name)
        ax.set_xlabel("global step")
        ax.grid(alpha=0.3)
        if any(label for label, points in series if points):
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return png(fig)
