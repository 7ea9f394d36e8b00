"""Vertex AI ``HyperparameterTuningJob`` configs from ``trainingInput.hyperparameters``.

``hyperparameter_tuning_job`` turns the study of AI Platform Training's YAML
(``spec.study_spec``) into a ``studySpec`` around the custom job that each
trial runs (``estimator.cloud.vertex_job``). Field names follow the ``aiplatform.v1``
discovery document. Command line: ``python -m estimator.vertex hp-tuning-job``.
"""

from __future__ import annotations

import json

from estimator.cloud.vertex_job import JobOptions, custom_job_spec, trainer_values
from estimator.common import storage
from estimator.tuning import spec as spec_lib
from estimator.tuning.spec import ParamType


def _parameter_spec(p: spec_lib.Param) -> dict:
    out = {"parameterId": p.name}
    if p.type == ParamType.DOUBLE:
        out["doubleValueSpec"] = {"minValue": float(p.min_value), "maxValue": float(p.max_value)}
    elif p.type == ParamType.INTEGER:
        out["integerValueSpec"] = {"minValue": str(p.min_value), "maxValue": str(p.max_value)}
    elif p.type == ParamType.DISCRETE:
        out["discreteValueSpec"] = {"values": [float(v) for v in p.values]}
    else:
        out["categoricalValueSpec"] = {"values": list(p.values)}
    if p.type in (ParamType.DOUBLE, ParamType.INTEGER):
        out["scaleType"] = p.scale
    return out


def hyperparameter_tuning_job(
    training_input: dict, study_spec: spec_lib.StudySpec, trainer_args, display_name: str, options: JobOptions
) -> dict:
    """A ``HyperparameterTuningJob`` for ``gcloud ai hp-tuning-jobs create --config``; each trial runs
    the custom job of ``vertex_job.custom_job_spec`` (``options``: its container, outputs, Spot VMs ...:
    each trial writes under ``baseOutputDirectory/<trial id>/``)."""
    study = {
        "metrics": [{"metricId": study_spec.metric, "goal": study_spec.goal}],
        "parameters": [_parameter_spec(p) for p in study_spec.params],
        "algorithm": study_spec.algorithm,
    }
    if study_spec.early_stopping:
        study["medianAutomatedStoppingSpec"] = {"useElapsedDuration": False}
    return {
        "displayName": display_name,
        "studySpec": study,
        "maxTrialCount": study_spec.max_trials,
        "parallelTrialCount": study_spec.max_parallel_trials,
        "maxFailedTrialCount": study_spec.max_failed_trials if study_spec.max_failed_trials_given else 0,
        "trialJobSpec": custom_job_spec(training_input, trainer_args, options),
    }


def trial_dir(config: dict, trial_id: str) -> str:
    """Where trial TRIAL_ID of the HyperparameterTuningJob CONFIG wrote: the trainer's job dir, Vertex AI's
    per-trial AIP_CHECKPOINT_DIR (``baseOutputDirectory/<trial>/checkpoints``), or ``--job-dir``/<trial>."""
    job = config["trialJobSpec"]
    pool = job["workerPoolSpecs"][0]
    args = (pool.get("containerSpec") or {}).get("args") or []
    job_dir = trainer_values(args).get("job_dir")
    if job_dir:
        return storage.join(job_dir, trial_id)
    base = (job.get("baseOutputDirectory") or {}).get("outputUriPrefix")
    if not base:
        raise spec_lib.SpecError("the study's trialJobSpec has neither baseOutputDirectory nor --job-dir.")
    return storage.join(base.rstrip("/"), trial_id, "checkpoints")


def finished_trials(config: dict, where=lambda path: path):
    """[(trial id, {parameterId: value}, validation metric)] of every trial of CONFIG that wrote its
    results.json (``where`` maps each path, e.g. a gs:// prefix to a local copy). The values are what each
    trial's trainer resolved (its hparams.json), the metric its last validation accuracy."""
    found = []
    names = [p["parameterId"] for p in config["studySpec"]["parameters"]]
    for trial in range(1, int(config["maxTrialCount"]) + 1):
        directory = where(trial_dir(config, str(trial)))
        results, hparams = storage.join(directory, "results.json"), storage.join(directory, "hparams.json")
        if not (storage.exists(results) and storage.exists(hparams)):
            continue  # not run, failed, or stopped early by the median rule
        metric = json.loads(storage.read_text(results)).get("validation_accuracy")
        resolved = json.loads(storage.read_text(hparams))["hparams"]
        if metric is not None:
            found.append((str(trial), {n: resolved[n.replace("-", "_")] for n in names}, metric))
    return found
