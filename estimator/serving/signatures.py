"""The exported model's interface, and ``export_saved_model`` that writes it.

A SavedModel (tag ``serve``) with two signatures over one float32 network:

* ``serving_default``: input ``image_bytes``, a batch of PNG or JPEG files as
  strings, any size; grayscale becomes RGB, an alpha channel is dropped, and
  images that are not 32x32 are resized to 32x32 (bilinear, antialiased).
  The alias ends in ``_bytes``, so TF Serving and Vertex AI take JSON requests
  as ``{"instances": [{"b64": "..."}]}``.
* ``images``: input ``images``, float32 ``[N, 32, 32, 3]`` RGB, values 0..255.

Both return ``classes`` (int32 ``[N]``), ``class_names`` (string ``[N]``) and
``probabilities`` (float32 ``[N, 10]``). The network is one tower with
inference-mode batch norm in float32, channels_last, whatever precision,
layout and devices trained it: checkpoints hold float32 variables anyway.
"""

from __future__ import annotations

import os
import time
import uuid

import tensorflow as tf

from estimator.common.options import DataFormat, Precision, VariableStrategy
from estimator.data import records as fmt
from estimator.networks import registry
from estimator.training.model_fn import model_fn

v1 = tf.compat.v1

IMAGE_BYTES_INPUT = "image_bytes"
IMAGES_INPUT = "images"
DEFAULT_SIGNATURE = "serving_default"
IMAGES_SIGNATURE = "images"
OUTPUTS = ("classes", "class_names", "probabilities")


class CheckpointMismatchError(ValueError):
    """The checkpoint was written by another network (depth, version)."""


def decode_image_bytes(image_bytes):
    """PNG/JPEG strings ``[N]`` -> float32 ``[N, 32, 32, 3]`` with values 0..255."""

    def one(data):
        image = tf.io.decode_image(data, channels=fmt.DEPTH, expand_animations=False)
        image.set_shape([None, None, fmt.DEPTH])
        size = tf.shape(image)[:2]
        same = tf.reduce_all(tf.equal(size, [fmt.HEIGHT, fmt.WIDTH]))
        # Images already 32x32 pass through untouched, so PNGs give back their exact pixels.
        return tf.cond(
            same,
            lambda: tf.cast(image, tf.float32),
            lambda: tf.image.resize(image, [fmt.HEIGHT, fmt.WIDTH], antialias=True),
        )

    return tf.map_fn(
        one, image_bytes, fn_output_signature=tf.TensorSpec([fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH], tf.float32)
    )


def serving_hparams(hp):
    """The training hyperparameters turned into the exported network's: one float32 CPU tower."""
    return hp.replace(
        num_gpus=0,
        num_cpu_towers=0,
        variable_strategy=VariableStrategy.CPU,
        data_format=DataFormat.CHANNELS_LAST,
        precision=Precision.FP32,
        eval_flip_tta=False,
    )


def build_serving_graph(hp):
    """Builds the serving network in the current graph; returns (inputs, outputs) dicts of tensors."""
    image_bytes = v1.placeholder(tf.string, [None], name=IMAGE_BYTES_INPUT)
    # Feeding "images" replaces the decoded bytes, so one network serves both signatures.
    images = v1.placeholder_with_default(
        decode_image_bytes(image_bytes), [None, fmt.HEIGHT, fmt.WIDTH, fmt.DEPTH], name=IMAGES_INPUT
    )
    spec = model_fn(images, None, tf.estimator.ModeKeys.PREDICT, serving_hparams(hp))
    outputs = {name: spec.predictions[name] for name in OUTPUTS}
    return {IMAGE_BYTES_INPUT: image_bytes, IMAGES_INPUT: images}, outputs


def check_checkpoint(checkpoint_path: str, variables, hp) -> None:
    """Raises CheckpointMismatchError if the checkpoint lacks a variable or has another shape."""
    stored = dict(tf.train.list_variables(checkpoint_path))
    for var in variables:
        name, shape = var.op.name, var.shape.as_list()
        if stored.get(name) != shape:
            found = "missing" if name not in stored else "shaped %s" % stored[name]
            mismatch = "its variable %s is %s (want %s)" % (name, found, shape)
            network = "%s does not hold a %s: %s" % (checkpoint_path, registry.describe(hp), mismatch)
            raise CheckpointMismatchError("%s: give its job's flags (--network, --num-layers ...)." % network)


def export_saved_model(checkpoint_path: str, export_dir: str, hp) -> str:
    """Writes the SavedModel of ``checkpoint_path`` to ``export_dir``, which must not exist.

    The model is built under a temporary name beside ``export_dir`` and renamed
    into place, so a failed export leaves nothing behind.

    Raises:
      CheckpointMismatchError: the checkpoint is of another network.
      FileExistsError: ``export_dir`` exists.
    """
    if tf.io.gfile.exists(export_dir):
        raise FileExistsError("%s already exists: name a new directory for the export." % export_dir)
    parent = os.path.dirname(export_dir.rstrip("/"))
    if parent:
        tf.io.gfile.makedirs(parent)
    temporary = "%s.tmp-%s" % (export_dir.rstrip("/"), uuid.uuid4().hex[:8])
    try:
        with tf.Graph().as_default():
            # Initial values are never used (the checkpoint is restored), but with
            # --deterministic TensorFlow refuses random initialisers without a seed.
            v1.set_random_seed(0)
            inputs, outputs = build_serving_graph(hp)
            variables = v1.global_variables()
            check_checkpoint(checkpoint_path, variables, hp)
            with v1.Session() as sess:
                v1.train.Saver(variables).restore(sess, checkpoint_path)
                builder = v1.saved_model.Builder(temporary)
                sigs = {
                    DEFAULT_SIGNATURE: v1.saved_model.predict_signature_def(
                        {IMAGE_BYTES_INPUT: inputs[IMAGE_BYTES_INPUT]}, outputs
                    ),
                    IMAGES_SIGNATURE: v1.saved_model.predict_signature_def(
                        {IMAGES_INPUT: inputs[IMAGES_INPUT]}, outputs
                    ),
                }
                builder.add_meta_graph_and_variables(
                    sess, [v1.saved_model.tag_constants.SERVING], signature_def_map=sigs, strip_default_attrs=True
                )
                builder.save()
        tf.io.gfile.rename(temporary, export_dir)
    finally:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.rmtree(temporary)
    return export_dir


def timestamps(base: str):
    """The timestamped export directories' names under ``base`` (as ints), oldest first."""
    if not tf.io.gfile.isdir(base):
        return []
    return sorted(int(n.rstrip("/")) for n in tf.io.gfile.listdir(base) if n.rstrip("/").isdigit())


def timestamped_dir(base: str) -> str:
    """``base/<unix seconds>``, a new name (as Estimator exports are named)."""
    stamp = int(time.time())
    while tf.io.gfile.exists(os.path.join(base, str(stamp))):
        stamp += 1
    return os.path.join(base, str(stamp))


def find_saved_model(path: str) -> str:
    """``path`` if it holds a SavedModel, else its newest timestamped SavedModel subdirectory.

    Raises:
      FileNotFoundError: naming ``path`` and what was expected.
    """
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return path
    for stamp in reversed(timestamps(path)):
        candidate = os.path.join(path, str(stamp))
        if tf.io.gfile.exists(os.path.join(candidate, "saved_model.pb")):
            return candidate
    raise FileNotFoundError(
        "%s holds no SavedModel: pass an export such as JOB_DIR/export/best (docs/serving.md)." % path
    )


def resolve_checkpoint(job_dir: str, checkpoint=None) -> str:
    """``checkpoint`` (a prefix such as JOB/model.ckpt-400), else the job's latest.

    Raises:
      FileNotFoundError: naming the missing checkpoint and what to pass.
    """
    if checkpoint:
        if not tf.io.gfile.exists(checkpoint + ".index"):
            raise FileNotFoundError(
                "%s is not a checkpoint: pass a prefix such as %s/model.ckpt-1000." % (checkpoint, job_dir)
            )
        return checkpoint
    latest = tf.train.latest_checkpoint(job_dir)
    if latest is None:
        raise FileNotFoundError("%s holds no checkpoint yet: train first, or pass --checkpoint." % job_dir)
    return latest
