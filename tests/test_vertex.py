"""Vertex AI configs from cmle_config.yaml and hptuning_config.yaml, against the aiplatform.v1 schema."""

import subprocess
import sys

import pytest
import yaml

from estimator import vertex as vertex_cli
from estimator.cloud import vertex_job
from estimator.tuning import spec as spec_lib
from tests.helpers import AIPLATFORM_SCHEMAS, REPO, check

PACKAGE = "gs://bucket/packages/cifar10-resnet-estimator-0.3.0.tar.gz"
TRAINER = ["--data-dir=gs://bucket/cifar-10-data", "--num-gpus=2", "--variable-strategy=GPU"]


def generate(tmp_path, *argv):
    out = str(tmp_path / "out.yaml")
    argv = list(argv)
    at = argv.index("--") if "--" in argv else len(argv)
    code = vertex_cli.main(argv[:at] + ["--output", out] + argv[at:])
    return code, (yaml.safe_load(open(out)) if code == 0 else None)


def schema_errors(value, name):
    return check(value, {"$ref": name}, name, schemas=AIPLATFORM_SCHEMAS)


def test_custom_job_from_cmle_config(tmp_path, capsys):
    code, job = generate(
        tmp_path,
        "custom-job",
        "--config",
        REPO + "/cmle_config.yaml",
        "--package-uri",
        PACKAGE,
        "--base-output-dir",
        "gs://bucket/jobs/j1",
        "--",
        *TRAINER,
    )
    assert code == 0
    assert schema_errors(job, "GoogleCloudAiplatformV1CustomJobSpec") == []
    chief, workers, ps = job["workerPoolSpecs"]
    assert chief["machineSpec"] == {
        "machineType": "n1-standard-16",
        "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 2,
    }
    assert (chief["replicaCount"], workers["replicaCount"], ps["replicaCount"]) == ("1", "2", "1")
    assert ps["machineSpec"] == {"machineType": "n1-highmem-8"}
    package = chief["pythonPackageSpec"]
    assert package == {
        "executorImageUri": vertex_job.PREBUILT_GPU_IMAGE,
        "packageUris": [PACKAGE],
        "pythonModule": "estimator.cifar10_main",
        "args": TRAINER,
    }
    assert job["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/jobs/j1"}
    out = capsys.readouterr()
    assert "gcloud ai custom-jobs create --region us-central1 --display-name cifar10-resnet --config" in out.out
    assert "2025-11-14" in out.err  # the prebuilt image's end of availability is said


def test_custom_container_and_an_empty_pool_for_missing_workers(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainingInput": {
                    "scaleTier": "CUSTOM",
                    "masterType": "n1-standard-8",
                    "parameterServerType": "n1-highmem-8",
                    "parameterServerCount": 1,
                }
            }
        )
    )
    code, job = generate(
        tmp_path,
        "custom-job",
        "--config",
        str(config),
        *"--image-uri us-docker.pkg.dev/p/r/t:1 -- --data-dir=gs://b/d".split(),
    )
    assert code == 0 and schema_errors(job, "GoogleCloudAiplatformV1CustomJobSpec") == []
    chief, skipped, ps = job["workerPoolSpecs"]
    assert skipped == {} and ps["replicaCount"] == "1"
    assert chief["containerSpec"] == {
        "imageUri": "us-docker.pkg.dev/p/r/t:1",
        "command": ["python", "-m", "estimator.cifar10_main"],
        "args": ["--data-dir=gs://b/d"],
    }


def test_hp_tuning_job_from_hptuning_config(tmp_path):
    code, job = generate(
        tmp_path,
        "hp-tuning-job",
        "--config",
        REPO + "/hptuning_config.yaml",
        "--package-uri",
        PACKAGE,
        "--",
        "--data-dir=gs://b/d",
        "--num-gpus=1",
    )
    assert code == 0
    assert schema_errors(job, "GoogleCloudAiplatformV1HyperparameterTuningJob") == []
    study = job["studySpec"]
    assert study["metrics"] == [{"metricId": "accuracy", "goal": "MAXIMIZE"}]
    assert study["algorithm"] == "ALGORITHM_UNSPECIFIED" and study["medianAutomatedStoppingSpec"]
    lr, wd, momentum = study["parameters"]
    assert lr == {
        "parameterId": "learning-rate",
        "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.5},
        "scaleType": "UNIT_LOG_SCALE",
    }
    assert momentum["scaleType"] == "UNIT_REVERSE_LOG_SCALE"
    assert (job["maxTrialCount"], job["parallelTrialCount"], job["maxFailedTrialCount"]) == (24, 4, 4)
    assert (
        job["trialJobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["executorImageUri"]
        == vertex_job.PREBUILT_GPU_IMAGE
    )


def test_every_parameter_type_maps_to_its_value_spec(tmp_path):
    config = tmp_path / "hp.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainingInput": {
                    "scaleTier": "BASIC",
                    "hyperparameters": {
                        "goal": "MINIMIZE",
                        "hyperparameterMetricTag": "accuracy",
                        "maxTrials": 6,
                        "algorithm": "GRID_SEARCH",
                        "params": [
                            {"parameterName": "num-layers", "type": "DISCRETE", "discreteValues": [8, 14, 20]},
                            {"parameterName": "train-batch-size", "type": "INTEGER", "minValue": 64, "maxValue": 65},
                            {
                                "parameterName": "lr-schedule",
                                "type": "CATEGORICAL",
                                "categoricalValues": ["cosine", "onecycle"],
                            },
                        ],
                    },
                }
            }
        )
    )
    code, job = generate(tmp_path, "hp-tuning-job", "--config", str(config), "--package-uri", PACKAGE)
    assert code == 0 and schema_errors(job, "GoogleCloudAiplatformV1HyperparameterTuningJob") == []
    discrete, integer, categorical = job["studySpec"]["parameters"]
    assert discrete["discreteValueSpec"] == {"values": [8.0, 14.0, 20.0]}
    assert integer == {
        "parameterId": "train-batch-size",
        "integerValueSpec": {"minValue": "64", "maxValue": "65"},
        "scaleType": "UNIT_LINEAR_SCALE",
    }
    assert categorical["categoricalValueSpec"] == {"values": ["cosine", "onecycle"]}
    assert job["maxFailedTrialCount"] == 0  # the service decides, as maxFailedTrials 0 meant
    assert job["trialJobSpec"]["workerPoolSpecs"][0]["machineSpec"] == {"machineType": "n1-standard-4"}


def test_the_schema_check_catches_mistakes():
    bad = {
        "workerPoolSpecs": [{"machineSpec": {"acceleratorType": "NVIDIA_GTX_1080"}, "replicaCount": "two", "typo": 1}],
        "studySpec": {},
    }
    errors = schema_errors(bad, "GoogleCloudAiplatformV1CustomJobSpec")
    for fragment in (
        "'NVIDIA_GTX_1080' is not one of",
        "replicaCount: expected an integer",
        "unknown field 'typo'",
        "unknown field 'studySpec'",
    ):
        assert any(fragment in e for e in errors), (fragment, errors)


@pytest.mark.parametrize(
    "training_input,message",
    [
        (
            {"scaleTier": "CUSTOM", "masterType": "complex_model_m_gpu"},
            "masterType 'complex_model_m_gpu' is a legacy AI Platform machine type .* use n1-standard-16 with 4 x "
            "NVIDIA_TESLA_T4",
        ),
        ({"scaleTier": "CUSTOM", "masterType": "n1-standard-4", "workerCount": 2}, "workerCount is 2 but workerType"),
        ({"scaleTier": "PREMIUM_1"}, "scaleTier 'PREMIUM_1'"),
        ({"scaleTier": "CUSTOM", "masterType": "n1-standard-4", "masterTyp": "x"}, "unknown field masterTyp"),
    ],
)
def test_refusals_name_the_field_and_the_fix(tmp_path, capsys, training_input, message):
    import re

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"trainingInput": training_input}))
    code, _ = generate(tmp_path, "custom-job", "--config", str(config), "--package-uri", PACKAGE)
    assert code == 2 and re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out.yaml").exists()


def test_a_package_uri_or_an_image_is_required(tmp_path, capsys):
    code, _ = generate(tmp_path, "custom-job", "--config", REPO + "/cmle_config.yaml", "--package-uri", "dist/x.tgz")
    assert code == 2 and "must be a gs:// URI of the sdist" in capsys.readouterr().err


def test_cli_runs_as_a_module(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            *"-m estimator.vertex custom-job --config cmle_config.yaml --package-uri".split(),
            PACKAGE,
            "--output",
            str(tmp_path / "j.yaml"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "gcloud ai custom-jobs create" in proc.stdout


def test_spec_refuses_bad_studies():
    base = {
        "goal": "MAXIMIZE",
        "params": [{"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.1, "maxValue": 0.2}],
    }
    assert spec_lib.study_spec({"hyperparameters": base}).max_failed_trials == 1  # 0: a quarter of 1 trial, >= 1
    with pytest.raises(spec_lib.SpecError, match="the trainer has no flag --learning-rat"):
        spec_lib.study_spec(
            {"hyperparameters": dict(base, params=[dict(base["params"][0], parameterName="learning-rat")])},
            trainer_flags={"--learning-rate"},
        )


def _one_machine(tmp_path):
    config = tmp_path / "one.yaml"
    config.write_text(yaml.safe_dump({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "n1-standard-8"}}))
    return str(config)


def test_recipes_reach_the_job_by_name_and_flag_files_are_read_into_it(tmp_path):
    def job_args(*trainer):
        image = ["--image-uri", "us-docker.pkg.dev/p/r/t:1"]
        code, job = generate(tmp_path, "custom-job", "--config", _one_machine(tmp_path), *image, "--", *trainer)
        assert code == 0 and schema_errors(job, "GoogleCloudAiplatformV1CustomJobSpec") == []
        return job["workerPoolSpecs"][0]["containerSpec"]["args"]

    # The container's package has the recipe: its name is enough.
    trainer = ["--recipe", "cpu_5min", "--data-dir=gs://b/d", "--seed", "3"]
    assert job_args(*trainer) == trainer
    # A flag file, and a recipe given as a file, do not travel with the job: their flags go in its arguments.
    flagfile = tmp_path / "mine.args"
    flagfile.write_text("# my flags\n--num-layers 20 --train-steps 100\n")
    args = job_args("@" + str(flagfile), "--recipe=" + str(flagfile), "--data-dir=gs://b/d")
    assert args == ["--num-layers", "20", "--train-steps", "100"] * 2 + ["--data-dir=gs://b/d"]
    assert not any(a.startswith("@") for a in args)


def test_a_recipe_the_trainer_would_refuse_in_the_jobs_cluster_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out.yaml"

    def refused(*trainer):  # cmle_config.yaml: a master, 2 workers and a parameter server
        config = ["--config", REPO + "/cmle_config.yaml", "--package-uri", PACKAGE, "--output", str(out)]
        code = vertex_cli.main(["custom-job", *config, "--", *trainer])
        assert code == 2 and not out.exists() and not (tmp_path / "out.yaml.tmp").exists()
        return capsys.readouterr().err.strip()

    assert refused("--recipe", "cpu_5min", "--data-dir=gs://b/d") == (
        "error: --time-budget from --recipe cpu_5min plans the steps of one process, and the chief cannot time its "
        "workers; this config's machines make a ps/worker cluster (2 worker, 1 ps): give the cluster "
        "--train-steps, or a config with a masterType alone (one machine)."
    )
    assert "missing.args: No such file or directory" in refused("@" + str(tmp_path / "missing.args"))
    # A study of a recipe (hptuning_recipe.yaml) runs each trial on one machine: its budget is fine there.
    image = ["--image-uri", "us-docker.pkg.dev/p/r/t:1"]
    trainer = ["--recipe", "cpu_5min", "--data-dir=gs://b/d"]
    code, job = generate(tmp_path, "hp-tuning-job", "--config", REPO + "/hptuning_recipe.yaml", *image, "--", *trainer)
    assert code == 0 and schema_errors(job, "GoogleCloudAiplatformV1HyperparameterTuningJob") == []
    [pool] = job["trialJobSpec"]["workerPoolSpecs"]
    assert pool["containerSpec"]["args"] == trainer
    names = [p["parameterId"] for p in job["studySpec"]["parameters"]]
    assert names == ["learning-rate", "weight-decay", "label-smoothing", "momentum", "batch-norm-decay", "crop-padding"]
