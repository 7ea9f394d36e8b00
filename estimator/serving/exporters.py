"""Exports made during training: the best model by validation accuracy, and the final one.

``tf.estimator.BestExporter`` compares ``loss`` unless given a function, and
after a restart it exports once more whatever the value
(tensorflow/tensorflow#47396, never fixed): a restarted job could replace its
best model with a worse one. ``BestAccuracyExporter`` keeps the best value in
``JOB_DIR/export/best/best_eval.json`` beside the exports, so a restarted job
compares against the real best. ``Exports`` is the job's guest (``--export``) that makes both.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from estimator.serving import signatures
from estimator.training.guest import Guest

v1 = tf.compat.v1

BEST = "best"
FINAL = "final"
BEST_RECORD = "best_eval.json"


def export_base(job_dir: str, kind: str) -> str:
    """``JOB_DIR/export/best`` or ``JOB_DIR/export/final``."""
    return os.path.join(job_dir, "export", kind)


def _keep_newest(base: str, keep: int) -> None:
    for stamp in signatures.timestamps(base)[:-keep]:
        tf.io.gfile.rmtree(os.path.join(base, str(stamp)))


def export_final(hp, checkpoint_path: str) -> str:
    """Exports ``checkpoint_path`` as ``JOB_DIR/export/final/<timestamp>``."""
    path = signatures.export_saved_model(
        checkpoint_path, signatures.timestamped_dir(export_base(hp.job_dir, FINAL)), hp
    )
    v1.logging.info("Exported the final model (%s) to %s", os.path.basename(checkpoint_path), path)
    return path


def copy_export(export_dir: str, model_dir: str) -> str:
    """Copies the SavedModel in ``export_dir`` to ``model_dir`` (its saved_model.pb at the top, where Vertex
    AI's model registry looks: ``gcloud ai models upload --artifact-uri``), replacing what a run before left."""
    for directory, _, files in tf.io.gfile.walk(export_dir):
        target = os.path.join(model_dir, os.path.relpath(directory, export_dir))
        tf.io.gfile.makedirs(target)
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target, name), overwrite=True)
    v1.logging.info("Copied the final model to %s (Vertex AI's AIP_MODEL_DIR)", model_dir)
    return model_dir


class BestAccuracyExporter(tf.estimator.Exporter):
    """After each evaluation, exports the checkpoint if its validation accuracy is the best so far."""

    def __init__(self, hp, metric: str = "accuracy", keep: int = 3):
        self._hp = hp
        self._metric = metric
        self._keep = keep
        self._base = export_base(hp.job_dir, BEST)

    @property
    def name(self):
        return BEST

    def best(self):
        """The record of the best export so far (from the job dir, so it survives restarts), or None."""
        path = os.path.join(self._base, BEST_RECORD)
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        value = float(eval_result[self._metric])
        best = self.best()
        if best is not None and value <= best[self._metric]:
            return None
        try:
            path = signatures.export_saved_model(checkpoint_path, signatures.timestamped_dir(self._base), self._hp)
        except tf.errors.NotFoundError:
            # An evaluator behind the chief: --keep-checkpoint-max newer checkpoints replaced this one.
            v1.logging.warning("No best export of %s: the checkpoint is gone; the next one may be", checkpoint_path)
            return None
        record = {
            self._metric: value,
            "global_step": int(eval_result["global_step"]),
            "checkpoint": checkpoint_path,
            "export": path,
        }
        with tf.io.gfile.GFile(os.path.join(self._base, BEST_RECORD), "w") as f:
            f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        _keep_newest(self._base, self._keep)
        v1.logging.info(
            "New best validation %s %.4f at step %d: exported to %s", self._metric, value, record["global_step"], path
        )
        return path


class Exports(Guest):
    """``--export``: the best by validation after each evaluation (where the validation split is not training data)
    and, on the chief, the final model before the test evaluation (copied to ``--model-export-dir``)."""

    def __init__(self, hp):
        self.hp = hp
        self.record = {}

    def after_eval(self) -> list:
        return [BestAccuracyExporter(self.hp)] if self.hp.validates else []

    def before_test(self, hp, estimator):
        self.record["final_export"] = export_final(self.hp, estimator.latest_checkpoint())
        if self.hp.model_export_dir:
            self.record["model_export_dir"] = copy_export(self.record["final_export"], self.hp.model_export_dir)
        return hp

    def results(self, results: dict, test_eval_secs: tuple) -> dict:
        return self.record
