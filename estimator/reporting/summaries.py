"""TensorBoard: the one place that writes and reads the run's event files outside the Estimator.

* ``summary_writer``: the process's v1 ``FileWriter`` for a directory (shared
  with the Estimator's), also from eager code; ``close_writers`` closes them all;
* ``write_scalars`` / ``write_image``: an evaluation's metrics, health values,
  pictures (``estimator.reporting.pictures``);
* ``read_scalars``: series read back from event files;
* ``write_curves``: ``JOB_DIR/curves.png`` from the run's own event files;
* ``append_health_event``: the one writer of ``JOB_DIR/health.json`` (the health rules' and the NaN guard's events).
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from estimator.common import logs, storage
from estimator.reporting import pictures

v1 = tf.compat.v1

HEALTH_RECORD = "health.json"


def image_summary(tag: str, png: bytes):
    """A v1 ``Summary`` holding one PNG image."""
    width, height = _png_size(png)
    image = v1.Summary.Image(encoded_image_string=png, height=height, width=width, colorspace=3)
    return v1.Summary(value=[v1.Summary.Value(tag=tag, image=image)])


def _png_size(png: bytes):
    # The IHDR chunk: width and height as big-endian 32-bit integers at bytes 16-24.
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def summary_writer(log_dir: str):
    """The process's v1 ``FileWriter`` for ``log_dir`` (shared with the Estimator's); also
    from eager code, e.g. after ``Estimator.evaluate`` (a v1 writer cannot be created eagerly)."""
    if tf.executing_eagerly():
        with tf.Graph().as_default():
            return v1.summary.FileWriterCache.get(log_dir)
    return v1.summary.FileWriterCache.get(log_dir)


def close_writers() -> None:
    """Closes every v1 ``FileWriter`` of the process, the Estimator's too. On Cloud Storage TensorFlow writes an
    event file as a whole local copy in TMPDIR, uploaded again on each flush and deleted only on close: a job
    that exits with its writers open leaves a copy of each of its event files behind (megabytes a job)."""
    v1.summary.FileWriterCache.clear()


def _flush_if_local(writer, log_dir: str) -> None:
    # On Cloud Storage a flush uploads the whole event file again (TensorFlow's client cannot append): there the
    # writer's own flush (every 120 s) and its close at the job's end serve; locally a flush costs nothing.
    if not storage.is_gcs(log_dir):
        writer.flush()


def write_image(log_dir: str, tag: str, png: bytes, step: int) -> None:
    writer = summary_writer(log_dir)
    writer.add_summary(image_summary(tag, png), step)
    _flush_if_local(writer, log_dir)


def read_scalars(log_dir: str, tags) -> dict:
    """{tag: [(step, value)]} from the event files directly in ``log_dir`` (not its subfolders)."""
    found = {t: {} for t in tags}
    pattern = os.path.join(log_dir, "events.out.tfevents.*")
    for path in sorted(tf.io.gfile.glob(pattern)):
        try:
            for event in v1.train.summary_iterator(path):
                for value in event.summary.value:
                    if value.tag in found and value.HasField("simple_value"):
                        found[value.tag][event.step] = value.simple_value
        except tf.errors.DataLossError:
            pass  # a file being written: what was read so far is kept
    return {t: sorted(v.items()) for t, v in found.items()}


def write_scalars(log_dir: str, values: dict, step: int) -> None:
    """Writes scalar summaries (an evaluation's metrics; ``global_step`` is left out) to ``log_dir``."""
    writer = summary_writer(log_dir)
    summary = v1.Summary(
        value=[v1.Summary.Value(tag=k, simple_value=float(v)) for k, v in sorted(values.items()) if k != "global_step"]
    )
    writer.add_summary(summary, step)
    _flush_if_local(writer, log_dir)


def write_curves(job_dir: str, validation_dir: str = "eval_validation") -> str:
    """Plots loss, accuracy and learning rate of a run into ``JOB_DIR/curves.png``; returns its path."""
    train = read_scalars(job_dir, ["train/cross_entropy", "train/accuracy", "train/learning_rate", "loss"])
    validation = read_scalars(storage.join(job_dir, validation_dir), ["cross_entropy", "accuracy"])
    path = storage.join(job_dir, "curves.png")
    storage.write_bytes(path, pictures.curves_png(train, validation, os.path.basename(job_dir.rstrip("/"))))
    return path


def append_health_event(job_dir: str, entry: dict) -> None:
    """Adds one event to JOB_DIR/health.json (a JSON list of objects)."""
    path = storage.join(job_dir, HEALTH_RECORD)
    events = json.loads(storage.read_text(path)) if storage.exists(path) else []
    events.append(entry)
    storage.write_text(path, json.dumps(events, indent=2) + "\n")


_warned_pictures = []


def write_picture(log_dirs, tag: str, draw, step: int) -> None:
    """Draws a PNG (``draw()``) and writes it to each of ``log_dirs``. Without matplotlib (a core dependency)
    says so once and the job goes on."""
    try:
        png = draw()
    except ImportError as e:
        if not _warned_pictures:
            _warned_pictures.append(e)
            logs.warning("no pictures in TensorBoard: %s (pip install matplotlib)", e)
        return
    if png:
        for directory in log_dirs:
            write_image(directory, tag, png, step)


def mirrored(log_dir: str, job_dir: str, mirror: str = None) -> list:
    """``log_dir`` (under ``job_dir``) and its twin under ``mirror`` (Vertex AI's TensorBoard directory), if any."""
    dirs = [log_dir]
    if mirror and log_dir.startswith(job_dir.rstrip("/")):
        dirs.append(mirror.rstrip("/") + log_dir[len(job_dir.rstrip("/")) :])
    return dirs
