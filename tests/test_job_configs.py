"""cmle_config.yaml and hptuning_config.yaml against the ml.v1 API's own schema."""

import os

import pytest
import yaml

from estimator.common import cluster as cluster_lib
from estimator.training import flags
from estimator.training.hooks import METRIC_TAG
from tests.helpers import REPO, check


def training_input(name):
    config = yaml.safe_load(open(os.path.join(REPO, name)))
    assert list(config) == ["trainingInput"], "gcloud --config files hold one trainingInput"
    return config["trainingInput"]


@pytest.mark.parametrize(
    "name", ["cmle_config.yaml", "cpu_config.yaml", "gpu_config.yaml", "hptuning_config.yaml", "hptuning_recipe.yaml"]
)
def test_config_matches_the_training_input_schema(name):
    spec = training_input(name)
    assert check(spec, {"$ref": "GoogleCloudMlV1__TrainingInput"}, "trainingInput") == []
    # What the schema cannot say, the service requires:
    assert spec["scaleTier"] == "CUSTOM" and spec["masterType"]
    for role in ("worker", "parameterServer"):
        if int(spec.get(role + "Count", 0)):
            assert spec[role + "Type"], "%sCount needs %sType" % (role, role)
    # Legacy AI Platform's runtimes mean nothing on Vertex AI, where the container decides: none is named.
    assert "runtimeVersion" not in spec and "pythonVersion" not in spec


def test_the_validator_catches_mistakes():
    bad = {
        "scaleTier": "HUGE",
        "workerCount": "two",
        "masterConfig": {"acceleratorConfig": {"type": "GPU"}},
        "hyperparameters": {"goal": "MAXIMISE", "maxTrials": 1.5, "params": [{"scaleType": "LOG"}]},
        "typo": 1,
    }
    errors = check(bad, {"$ref": "GoogleCloudMlV1__TrainingInput"}, "trainingInput")
    for fragment in (
        "'HUGE' is not one of",
        "workerCount: expected an integer",
        "'GPU' is not one of",
        "'MAXIMISE' is not one of",
        "maxTrials: expected an integer",
        "'LOG' is not one of",
        "unknown field 'typo'",
    ):
        assert any(fragment in e for e in errors), (fragment, errors)


def test_cluster_config_uses_parameter_servers_and_gpus():
    spec = training_input("cmle_config.yaml")
    assert int(spec["parameterServerCount"]) >= 1 and int(spec["workerCount"]) >= 1
    counts = {spec[r]["acceleratorConfig"]["count"] for r in ("masterConfig", "workerConfig", "evaluatorConfig")}
    assert int(spec["evaluatorCount"]) == 1  # validations while it trains: a chief only trains
    counts = [spec[r]["acceleratorConfig"]["count"] for r in ("masterConfig", "workerConfig", "evaluatorConfig")]
    assert counts == [2, 2, 1]  # the README's command passes --num-gpus 2; the evaluator gives itself 1
    assert spec["evaluatorConfig"]["containerArgs"] == ["--num-gpus", "1"]
    assert "complex_model_m_gpu" in open(os.path.join(REPO, "cmle_config.yaml")).read()


def test_tuning_study_optimises_the_metric_the_trainer_reports():
    hp = training_input("hptuning_config.yaml")["hyperparameters"]
    assert hp["goal"] == "MAXIMIZE" and hp["hyperparameterMetricTag"] == "accuracy"
    assert hp["hyperparameterMetricTag"] == METRIC_TAG
    assert hp["maxParallelTrials"] <= hp["maxTrials"] and hp["maxFailedTrials"] > 0
    assert hp["enableTrialEarlyStopping"] is True
    lr = [p for p in hp["params"] if p["parameterName"] == "learning-rate"][0]
    assert (lr["type"], lr["scaleType"], lr["minValue"], lr["maxValue"]) == ("DOUBLE", "UNIT_LOG_SCALE", 1e-4, 0.5)


def _values(param):
    if param["type"] in ("DOUBLE", "INTEGER"):
        assert param["minValue"] < param["maxValue"]
        return [param["minValue"], param["maxValue"]]
    if param["type"] == "DISCRETE":
        return param["discreteValues"]
    return param["categoricalValues"]


@pytest.mark.parametrize("name", ["hptuning_config.yaml", "hptuning_recipe.yaml"])
def test_every_tuned_parameter_is_a_trainer_flag_in_range(name):
    parser = flags.build_parser()
    options = {s for action in parser._actions for s in action.option_strings}
    for param in training_input(name)["hyperparameters"]["params"]:
        assert "--" + param["parameterName"] in options, param["parameterName"]
        for value in _values(param):
            # The service passes --name=value; the trainer must accept both ends of every range.
            args = parser.parse_args(
                ["--data-dir", "d", "--job-dir", "j", "--num-gpus", "0", "--%s=%s" % (param["parameterName"], value)]
            )
            flags.validate(args, cluster_lib.Cluster(), gpus_visible=0)
