"""Vertex AI configs from cmle_config.yaml and hptuning_config.yaml, against the aiplatform.v1 schema."""

import os
import re
import subprocess
import sys

import pytest
import yaml

from estimator import vertex as vertex_cli
from estimator.budget import family
from estimator.cloud import rehearsal
from estimator.tuning import spec as spec_lib
from tests.helpers import AIPLATFORM_SCHEMAS, REPO, check, google_type_errors

PACKAGE = "gs://bucket/packages/cifar10-resnet-estimator-0.3.0.tar.gz"
IMAGE = "us-central1-docker.pkg.dev/p/r/cifar10-estimator:gpu"
TRAINER = ["--data-dir=gs://bucket/cifar-10-data", "--num-gpus=2", "--variable-strategy=GPU", "--train-steps=100"]
OUT = ["--image-uri", IMAGE, "--base-output-dir", "gs://bucket/jobs/j1"]


def generate(tmp_path, *argv):
    out = str(tmp_path / "out.yaml")
    argv = list(argv)
    at = argv.index("--") if "--" in argv else len(argv)
    code = vertex_cli.main(argv[:at] + ["--output", out] + argv[at:])
    config = yaml.safe_load(open(out)) if code == 0 else None
    if config is not None:  # what gcloud's own check of a --config file asks of every pool, and Google's types
        job = config.get("trialJobSpec", config)
        rehearsal.check_pools(job["workerPoolSpecs"])
        assert google_type_errors(config) == []
    return code, config


def schema_errors(value, name):
    return check(value, {"$ref": name}, name, schemas=AIPLATFORM_SCHEMAS)


def test_custom_job_from_cmle_config_runs_the_packages_container(tmp_path, capsys):
    code, job = generate(tmp_path, "custom-job", "--config", REPO + "/cmle_config.yaml", *OUT, "--", *TRAINER)
    assert code == 0
    assert schema_errors(job, "GoogleCloudAiplatformV1CustomJobSpec") == []
    chief, workers, ps, evaluator = job["workerPoolSpecs"]
    two_t4s = {"machineType": "n1-standard-16", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 2}
    assert chief["machineSpec"] == two_t4s == workers["machineSpec"]
    # The evaluator validates once per checkpoint: one T4, its own --num-gpus after the job's flags.
    one_t4 = {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1}
    assert evaluator["machineSpec"] == one_t4
    assert [p["replicaCount"] for p in (chief, workers, ps, evaluator)] == ["1", "2", "1", "1"]
    assert ps["machineSpec"] == {"machineType": "n1-highmem-8"}
    for pool in (chief, workers, ps, evaluator):
        assert pool["containerSpec"] == {
            "imageUri": IMAGE,
            "command": ["python", "-m", "estimator.cifar10_main"],
            "args": TRAINER + (["--num-gpus", "1"] if pool is evaluator else []),
        }
    assert job["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/jobs/j1"}
    out = capsys.readouterr()
    assert "gcloud ai custom-jobs create --region us-central1 --display-name cifar10-resnet --config" in out.out
    assert "python -m estimator.vertex local-run" in out.out and out.err == ""


def test_the_retired_package_route_is_refused_and_the_container_asked_for(tmp_path, capsys):
    """The package route (an executor image installing the sdist) was retired in 0.6.0: its flags and
    trainingInput.packageUris are refused in one line; without --image-uri the container is asked for."""
    trainer = ["--data-dir=gs://b/d", "--job-dir=gs://b/j", "--num-gpus=1", "--train-steps=10"]
    args = ["custom-job", "--config", REPO + "/gpu_config.yaml"]
    for flag in (["--executor-image-uri", "europe-docker.pkg.dev/p/r/tf215:1"], ["--package-uri", PACKAGE]):
        with pytest.raises(SystemExit):
            generate(tmp_path, *args, *flag, "--", *trainer)
        [line] = capsys.readouterr().err.strip().splitlines()[-1:]
        assert line.endswith(
            "%s: the package route was retired in 0.6.0 (Google's TensorFlow 2.15 executor images "
            "are gone, and an image of your own is the container route with one image more): build "
            "the Dockerfile's image and give --image-uri." % flag[0]
        ), line
    code, _ = generate(tmp_path, *args, "--", *trainer)
    assert code == 2 and capsys.readouterr().err.startswith("error: name the container that runs the trainer")
    assert not (tmp_path / "out.yaml").exists()


def test_gaps_between_pools_are_refused_as_gcloud_refuses_empty_pools(tmp_path, capsys):
    for machines, missing in [
        ({"parameterServerType": "n1-highmem-8", "parameterServerCount": 1}, "has parameter servers but no workers"),
        ({"evaluatorType": "n1-standard-8", "evaluatorCount": 1}, "has an evaluator but no workers and no parameter"),
    ]:
        config = tmp_path / "c.yaml"
        config.write_text(
            yaml.safe_dump({"trainingInput": dict({"scaleTier": "CUSTOM", "masterType": "n1-standard-8"}, **machines)})
        )
        code, _ = generate(tmp_path, "custom-job", "--config", str(config), *OUT, "--", "--data-dir=gs://b/d")
        assert code == 2 and missing in capsys.readouterr().err
    assert not (tmp_path / "out.yaml").exists()


def test_every_field_of_the_yaml_is_written_or_refused(tmp_path, capsys):
    fields = {
        "scaleTier": "CUSTOM",
        "masterType": "n1-standard-8",
        "region": "europe-west4",
        "jobDir": "gs://b/jobs/from-yaml",
        "args": ["--train-steps", "50"],
        "serviceAccount": "trainer@p.iam.gserviceaccount.com",
        "network": "projects/123/global/networks/vpc",
        "scheduling": {"maxRunningTime": "7200s"},
        "useChiefInTfConfig": True,
        "pythonModule": "estimator.cifar10_main",
        "masterConfig": {
            "containerCommand": ["python", "-m", "estimator.cifar10_main"],
            "containerArgs": ["--seed", "3"],
            "diskConfig": {"bootDiskType": "pd-standard", "bootDiskSizeGb": 200},
        },
        "workerType": "n1-standard-8",
        "workerCount": 1,
        "workerConfig": {"imageUri": IMAGE + "-worker"},
        "parameterServerType": "n1-highmem-8",
        "parameterServerCount": 1,
        "evaluatorType": "n1-standard-8",
        "evaluatorCount": 1,
    }
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"trainingInput": fields}))
    tensorboard = "projects/p/locations/europe-west4/tensorboards/42"
    image = ["--image-uri", IMAGE, "--tensorboard", tensorboard]
    cpu = ["--data-dir=gs://b/d", "--num-gpus=0"]
    code, job = generate(tmp_path, "custom-job", "--config", str(config), *image, "--", *cpu)
    assert code == 0 and schema_errors(job, "GoogleCloudAiplatformV1CustomJobSpec") == []
    chief, worker, ps, evaluator = job["workerPoolSpecs"]
    assert chief["containerSpec"]["args"] == ["--train-steps", "50"] + cpu + ["--seed", "3"]
    assert chief["diskSpec"] == {"bootDiskType": "pd-standard", "bootDiskSizeGb": 200} and "diskSpec" not in worker
    assert [p["containerSpec"]["imageUri"] for p in (chief, worker, ps, evaluator)] == [IMAGE, IMAGE + "-worker"] + [
        IMAGE
    ] * 2
    assert evaluator["containerSpec"]["args"] == ["--train-steps", "50"] + cpu
    assert job["baseOutputDirectory"] == {"outputUriPrefix": "gs://b/jobs/from-yaml"}
    assert (job["serviceAccount"], job["network"], job["tensorboard"]) == (
        fields["serviceAccount"],
        fields["network"],
        tensorboard,
    )
    assert job["scheduling"] == {"timeout": "7200s"}
    out = capsys.readouterr().out
    assert "--region europe-west4" in out and "no evaluator" not in out
    # The job's image from masterConfig.imageUri alone.
    alone = {"scaleTier": "CUSTOM", "masterType": "n1-standard-8", "masterConfig": {"imageUri": IMAGE}}
    config.write_text(yaml.safe_dump({"trainingInput": alone}))
    code, job = generate(tmp_path, "custom-job", "--config", str(config), "--base-output-dir", "gs://b/j", "--", *cpu)
    assert code == 0 and job["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == IMAGE
    refusals = [
        ({"runtimeVersion": "2.11"}, "runtimeVersion '2.11' is legacy AI Platform's runtime"),
        ({"pythonVersion": "3.7"}, "pythonVersion '3.7' is legacy"),
        ({"scheduling": {"priority": 3}}, "scheduling.priority has no Vertex AI equivalent"),
        ({"useChiefInTfConfig": False}, "always names worker pool 0 'chief'"),
        ({"pythonModule": "trainer.task"}, "pythonModule 'trainer.task': the trainer is estimator.cifar10_main"),
        ({"packageUris": [PACKAGE]}, "trainingInput.packageUris: the package route was retired in 0.6.0"),
        ({"network": "vpc"}, "must be projects/PROJECT_NUMBER/global/networks/NAME"),
        ({"scheduling": {"maxWaitTime": "600s"}}, "scheduling.maxWaitTime has no Vertex AI equivalent: remove it"),
        ({"masterConfig": {"containerCommand": ["python", "task.py"]}}, "every pool runs the trainer"),
        ({"masterConfig": {"tpuTfVersion": "2.15"}}, "masterConfig.tpuTfVersion: the trainer's towers are GPUs"),
        ({"workerConfig": {"typo": 1}}, "trainingInput.workerConfig: unknown field typo"),
        ({"masterConfig": {"diskConfig": {"size": 1}}}, "diskConfig: unknown field size"),
        (
            {"masterConfig": {"imageUri": IMAGE + "-other"}},
            "--image-uri %r and trainingInput.masterConfig.imageUri" % IMAGE,
        ),
        ({"evaluatorCount": 2}, "evaluatorCount 2: TensorFlow runs one evaluator: give 1"),
        (
            {"masterConfig": {"acceleratorConfig": {"type": "NVIDIA_T4", "count": 1}}},
            "type 'NVIDIA_T4' is not one of Vertex AI's GPUs: give NVIDIA_TESLA_T4.",
        ),
        ({"masterConfig": {"acceleratorConfig": {"type": "TPU_V3", "count": 8}}}, "'TPU_V3' is not one of"),
        (
            {"masterConfig": {"acceleratorConfig": {"type": "NVIDIA_TESLA_K80", "count": 1}}},
            "type NVIDIA_TESLA_K80 has reached its end of support: use NVIDIA_TESLA_T4.",
        ),
        (
            {"scaleTier": "BASIC_GPU", "masterType": None},
            "scaleTier BASIC_GPU: give gpu_config.yaml's fields, with masterType n1-standard-8 and 1 NVIDIA_TESLA_T4",
        ),
        ({"hyperparameters": {"goal": "MAXIMIZE"}}, "has trainingInput.hyperparameters: a custom job runs no study"),
    ]
    for change, message in refusals:
        config.write_text(yaml.safe_dump({"trainingInput": dict(fields, **change)}))
        code, _ = generate(tmp_path, "custom-job", "--config", str(config), *image, "--", *cpu)
        assert code == 2 and message in capsys.readouterr().err, change
    config.write_text(yaml.safe_dump({"trainingInput": fields}))
    for flags, message in [
        (["--region", "us-central1"], "--region 'us-central1' and trainingInput.region 'europe-west4' disagree"),
        (["--tensorboard", "tb-42"], "must name a Vertex AI TensorBoard instance"),
        (["--service-account", "other@p.iam.gserviceaccount.com"], "disagree: give one of them"),
    ]:
        code, _ = generate(tmp_path, "custom-job", "--config", str(config), "--image-uri", IMAGE, *flags)
        assert code == 2 and message in capsys.readouterr().err, flags
    del fields["serviceAccount"]
    config.write_text(yaml.safe_dump({"trainingInput": fields}))
    code, _ = generate(tmp_path, "custom-job", "--config", str(config), *image, "--", *cpu)
    assert code == 2 and "--tensorboard needs --service-account" in capsys.readouterr().err
    # TensorBoard streams AIP_TENSORBOARD_LOG_DIR, which Vertex AI sets only with a base output directory.
    del fields["jobDir"]
    config.write_text(yaml.safe_dump({"trainingInput": fields}))
    account = ["--service-account", "t@p.iam.gserviceaccount.com"]
    code, _ = generate(
        tmp_path, "custom-job", "--config", str(config), *image, *account, "--", *cpu, "--job-dir=gs://b/j"
    )
    assert (
        code == 2
        and "--tensorboard needs --base-output-dir gs://BUCKET/jobs/NAME, where its logs are" in capsys.readouterr().err
    )
    # A cluster without an evaluator is written, with the line that says what it loses.
    for role in ("evaluatorType", "evaluatorCount"):
        del fields[role]
    config.write_text(yaml.safe_dump({"trainingInput": fields}))
    code, _ = generate(
        tmp_path, "custom-job", "--config", str(config), "--image-uri", IMAGE, "--", *cpu, "--job-dir=gs://b/j"
    )
    out = capsys.readouterr().out
    assert (
        code == 0 and "note: this cluster has no evaluator: on Vertex AI worker pool 0 is a chief, which only " in out
    )
    # A tuning job cannot resume another on Vertex AI.
    study = yaml.safe_load(open(REPO + "/hptuning_config.yaml"))
    study["trainingInput"]["hyperparameters"]["resumePreviousJobId"] = "study-1"
    config.write_text(yaml.safe_dump(study))
    code, _ = generate(tmp_path, "hp-tuning-job", "--config", str(config), *OUT, "--", *TRAINER[:1], "--num-gpus=1")
    assert (
        code == 2 and "resumePreviousJobId: a Vertex AI tuning job cannot continue another" in capsys.readouterr().err
    )


def test_a_job_that_would_stop_at_start_up_is_refused_before_it_is_written(tmp_path, capsys):
    one = _one_machine(tmp_path)
    for flags, trainer, message in [
        (["--image-uri", IMAGE], ["--data-dir=gs://b/d"], "this job has no place for its outputs"),
        (OUT, ["--data-dir", "work/cifar-10-data"], "--data-dir work/cifar-10-data is a directory of this machine"),
        (OUT, ["--data-dir=gs://b/d", "--num-gpus=1"], "--num-gpus 1 but 0 GPU(s) are visible"),
        (OUT, ["--data-dir=gs://b/d", "--train-batch-size=0"], "--train-batch-size 0 must be positive"),
        (OUT, ["--num-layers=20"], "the following arguments are required: --data-dir"),
        (OUT, ["--data-dir=gs://b/d", "--num-gpus=0", "--sync"], "--sync synchronises workers of a distributed job"),
    ]:
        code, _ = generate(tmp_path, "custom-job", "--config", one, *flags, "--", *trainer)
        assert code == 2 and message in capsys.readouterr().err, trainer
        assert not (tmp_path / "out.yaml").exists()


def test_hp_tuning_job_from_hptuning_config(tmp_path):
    code, job = generate(
        tmp_path,
        "hp-tuning-job",
        "--config",
        REPO + "/hptuning_config.yaml",
        *OUT,
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
    assert job["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == IMAGE
    assert job["trialJobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/jobs/j1"}


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
    code, job = generate(
        tmp_path, "hp-tuning-job", "--config", str(config), *OUT, "--", "--data-dir=gs://b/d", "--num-gpus=0"
    )
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


def test_the_gpus_written_are_those_of_google_s_own_accelerator_type_and_its_types_catch_mistakes():
    """vertex_job.GPU_TYPES is aiplatform.v1's AcceleratorType less its TPUs; and Google's types, which every
    config written here is parsed with, refuse what Vertex AI would."""
    from google.cloud.aiplatform_v1.types import AcceleratorType

    from estimator.cloud import vertex_job
    from tests.helpers import google_type_errors

    names = [t.name for t in AcceleratorType if t.name != "ACCELERATOR_TYPE_UNSPECIFIED"]
    gpus = [n for n in names if not n.startswith("TPU_")]
    # Google's enum says which are gone, in each value's note: "Deprecated: ... has reached end of support".
    notes = dict(re.findall(r"\n\s+(\w+) \(\d+\):\n\s+(.+?)(?=\n\s+\w+ \(\d+\):|\Z)", AcceleratorType.__doc__, re.S))
    deprecated = {n for n in gpus if notes[n].startswith("Deprecated")}
    assert deprecated == set(vertex_job.RETIRED_GPUS) == {"NVIDIA_TESLA_K80"}
    assert list(vertex_job.GPU_TYPES) == [n for n in gpus if n not in deprecated]
    assert set(vertex_job.RETIRED_GPUS.values()) <= set(vertex_job.GPU_TYPES)
    pool = {"machineSpec": {"machineType": "n1-standard-8"}, "replicaCount": "1", "containerSpec": {"imageUri": "i"}}
    assert google_type_errors({"workerPoolSpecs": [pool]}) == []
    for change, fragment in [
        ({"machineSpec": {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_T4"}}, "NVIDIA_T4"),
        ({"diskConfig": {"bootDiskSizeGb": 100}}, "diskConfig"),
        ({"replicaCount": "two"}, "replicaCount"),
    ]:
        [error] = google_type_errors({"workerPoolSpecs": [dict(pool, **change)]})
        assert fragment in error, change


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
            "masterType 'complex_model_m_gpu' is a legacy AI Platform machine type: use n1-standard-16 with 4 x "
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
    code, _ = generate(tmp_path, "custom-job", "--config", str(config), *OUT, "--", "--data-dir=gs://b/d")
    assert code == 2 and re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out.yaml").exists()


def test_cli_runs_as_a_module(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            *"-m estimator.vertex custom-job --config cmle_config.yaml".split(),
            *OUT,
            "--output",
            str(tmp_path / "j.yaml"),
            "--",
            *TRAINER,
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
        code, job = generate(tmp_path, "custom-job", "--config", _one_machine(tmp_path), *OUT, "--", *trainer)
        assert code == 0 and schema_errors(job, "GoogleCloudAiplatformV1CustomJobSpec") == []
        return job["workerPoolSpecs"][0]["containerSpec"]["args"]

    # The container's package has the recipe: its name is enough.
    trainer = ["--recipe", "cpu_5min", "--data-dir=gs://b/d", "--seed", "3"]  # the recipe trains on the CPU
    assert job_args(*trainer) == trainer
    # A flag file, and a recipe given as a file, do not travel with the job: their flags go in its arguments.
    flagfile = tmp_path / "mine.args"
    flagfile.write_text("# my flags\n--num-layers 20 --train-steps 100\n")
    args = job_args("@" + str(flagfile), "--recipe=" + str(flagfile), "--data-dir=gs://b/d", "--num-gpus=0")
    assert args == ["--num-layers", "20", "--train-steps", "100"] * 2 + ["--data-dir=gs://b/d", "--num-gpus=0"]
    assert not any(a.startswith("@") for a in args)


def test_a_recipe_the_trainer_would_refuse_in_the_jobs_cluster_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out.yaml"

    def refused(*trainer):  # cmle_config.yaml: a master, 2 workers and a parameter server
        config = ["--config", REPO + "/cmle_config.yaml", *OUT, "--output", str(out)]
        code = vertex_cli.main(["custom-job", *config, "--", *trainer])
        assert code == 2 and not out.exists() and not (tmp_path / "out.yaml.tmp").exists()
        return capsys.readouterr().err.strip()

    assert refused("--recipe", "cpu_5min", "--data-dir=gs://b/d") == (
        "error: --time-budget from --recipe cpu_5min plans the steps of one process, and the chief cannot time its "
        "workers, and this is a ps/worker cluster (2 worker, 1 ps): give --train-steps."
    )
    missing = str(tmp_path / "missing.args")
    assert (
        refused("@" + missing)
        == "error: the trainer would refuse its flags: [Errno 2] No such file or directory: %r" % missing
    )
    # A study of a recipe (hptuning_recipe.yaml) runs each trial on one machine: its budget is fine there.
    # Its trials train on the training split (reporting validation accuracy) and all train one member.
    trainer = ["--recipe", "cpu_5min", "--data-dir=gs://b/d"]
    study = ["hp-tuning-job", "--config", REPO + "/hptuning_recipe.yaml", *OUT]
    code, _ = generate(tmp_path, *study, "--", *trainer)
    assert code == 2 and "name the member every trial trains with --network-member" in capsys.readouterr().err
    code, job = generate(tmp_path, *study, "--network-member", "airbench94 x0.5", "--", *trainer)
    assert code == 0 and schema_errors(job, "GoogleCloudAiplatformV1HyperparameterTuningJob") == []
    [pool] = job["trialJobSpec"]["workerPoolSpecs"]
    # ... and share the speed probes' measurements under the study's output directory (each trial is a new
    # machine of one type: the first trial's timing serves the rest).
    member = family.member("airbench94 x0.5").flags()
    shared = ["--probe-cache", "gs://bucket/jobs/j1/probe-cache"]
    assert pool["containerSpec"]["args"] == trainer + ["--train-subsets", "train"] + member + shared
    out = capsys.readouterr().out
    assert "note: the trials share their speed probes' measurements in gs://bucket/jobs/j1/probe-cache" in out
    assert "note: the trials train on the training split alone and report accuracy on the validation split" in out
    names = [p["parameterId"] for p in job["studySpec"]["parameters"]]
    assert names == ["learning-rate", "weight-decay", "label-smoothing", "momentum", "batch-norm-decay", "crop-padding"]


def documented_commands():
    """Every ``python -m estimator.vertex`` command of docs/cloud.md's code blocks, continuation lines joined."""
    import re
    import shlex

    text = open(REPO + "/docs/cloud.md").read()
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").splitlines()]
    # Inline commands of the prose too: every one that writes a job.
    lines += re.findall(r"`(python -m estimator\.vertex (?:custom-job|hp-tuning-job) [^`]*)`", text)
    commands = []
    for line in lines:
        if line.startswith("python -m estimator.vertex "):
            words = shlex.split(line.replace("$IMAGE", IMAGE.rsplit(":", 1)[0]).replace("$BUCKET", "bucket"))
            words = [w.replace("$SA", "cifar10-trainer@p.iam.gserviceaccount.com") for w in words]
            commands.append(words[3:])
    return commands


def test_every_vertex_command_of_the_docs_writes_a_valid_config(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the docs' commands run from the repository (cmle_config.yaml ...)
    commands = documented_commands()
    kinds = [c[0] for c in commands]
    assert kinds.count("custom-job") >= 3 and kinds.count("hp-tuning-job") >= 2 and "local-run" in kinds
    for command in commands:
        if command[0] == "local-run":
            continue  # tests/test_rehearsal.py runs the rehearsals
        out = str(tmp_path / "written.yaml")
        at = command.index("--output")
        code = vertex_cli.main(command[:at] + ["--output", out] + command[at + 2 :])
        assert code == 0, (command, capsys.readouterr().err)
        written = yaml.safe_load(open(out))
        name = "HyperparameterTuningJob" if command[0] == "hp-tuning-job" else "CustomJobSpec"
        assert schema_errors(written, "GoogleCloudAiplatformV1" + name) == [], command
        assert google_type_errors(written) == [], command
        rehearsal.check_pools(written.get("trialJobSpec", written)["workerPoolSpecs"])


def test_best_args_of_a_finished_vertex_study_read_through_cloud_storage(gcs, tmp_path, capsys, monkeypatch):
    """Each trial's trainer left hparams.json and results.json in its AIP_CHECKPOINT_DIR (here written to the
    storage emulator as the trainer writes them); best-args reads them through Cloud Storage and writes the
    recipe back with the best trial's parameters, for the final model on both splits."""
    import json

    from estimator.common import storage
    from estimator.training import flags

    trainer = ["--recipe", "cpu_5min", "--data-dir=%s/cifar-10-data" % gcs]
    study = ["hp-tuning-job", "--config", REPO + "/hptuning_recipe.yaml", "--image-uri", IMAGE]
    base = "%s/studies/s1" % gcs
    code, _ = generate(tmp_path, *study, "--base-output-dir", base, "--network-member", "airbench94", "--", *trainer)
    assert code == 0
    capsys.readouterr()
    names = ["learning-rate", "weight-decay", "label-smoothing", "momentum", "batch-norm-decay", "crop-padding"]
    for trial, accuracy, rate in [("1", 0.81, 0.5), ("2", 0.86, 0.9), ("4", 0.84, 1.2)]:  # 3 failed
        directory = "%s/%s/checkpoints" % (base, trial)
        resolved = {n.replace("-", "_"): 0.1 for n in names}
        resolved.update(learning_rate=rate, crop_padding=3)
        storage.write_text(directory + "/hparams.json", json.dumps({"hparams": resolved}))
        storage.write_text(directory + "/results.json", json.dumps({"validation_accuracy": accuracy}))
    out = str(tmp_path / "best.args")
    assert vertex_cli.main(["best-args", str(tmp_path / "out.yaml"), "--output", out]) == 0
    said = capsys.readouterr().out
    assert "trial 1: accuracy 0.8100" in said and "trial 3" not in said and "Best trial 2." in said
    lines = open(out).read().splitlines()
    assert lines[0] == (
        "# The best trial (2) of the Vertex AI study cifar10-resnet (3 trials finished): accuracy 0.8600 on the "
        "validation split."
    )
    assert lines[2] == "--recipe cpu_5min"  # the study's own flags: no --train-subsets, no member, no data dir
    assert lines[3:5] == ["--learning-rate=0.9", "--weight-decay=0.1"] and lines[-1] == "--crop-padding=3"
    final = flags.build_parser().parse_args(["@" + out, "--data-dir", "d", "--job-dir", "j"])
    assert final.train_subsets == ["train", "validation"] and final.network == "auto" and final.learning_rate == 0.9
    # Nothing finished yet: said so, nothing written.
    os.remove(out)
    empty = str(tmp_path / "empty.yaml")
    code, _ = generate(
        tmp_path, *study, "--base-output-dir", gcs + "/s2", "--network-member", "airbench94", "--", *trainer
    )
    os.replace(str(tmp_path / "out.yaml"), empty)
    assert vertex_cli.main(["best-args", empty, "--output", out]) == 1 and not os.path.exists(out)
    assert "no trial of %s has written its results.json yet" % empty in capsys.readouterr().err


def test_a_written_job_says_the_quota_it_needs(tmp_path, capsys):
    """The quota a new project must have before submitting (docs/cloud.md's table), printed beside the gcloud
    command: the cluster, the one-GPU smoke job, and a study's trials at their parallelism."""
    data = "--data-dir=gs://b/d"
    for config, flags, needs in [
        (
            "cmle_config.yaml",
            ["--num-gpus=2", "--variable-strategy=GPU"],
            "64 N1 vCPUs, 7 custom_model_training_nvidia_t4_gpus",
        ),
        (
            "gpu_config.yaml",
            ["--num-gpus=1", "--network=airbench"],
            "8 N1 vCPUs, 1 custom_model_training_nvidia_t4_gpus",
        ),
        ("cpu_config.yaml", ["--num-gpus=0"], "8 N1 vCPUs (docs"),
    ]:
        args = ["custom-job", "--config", os.path.join(REPO, config), "--image-uri", IMAGE, "--region", "us-central1"]
        code, job = generate(tmp_path, *args, "--base-output-dir", "gs://b/j", "--", data, *flags)
        assert code == 0 and "Quota it needs in us-central1: " + needs in capsys.readouterr().out, config
    args = ["hp-tuning-job", "--config", os.path.join(REPO, "hptuning_config.yaml"), "--image-uri", IMAGE]
    code, _ = generate(tmp_path, *args, "--base-output-dir", "gs://b/t", "--", data, "--num-gpus=1")
    assert code == 0 and "32 N1 vCPUs, 4 custom_model_training_nvidia_t4_gpus" in capsys.readouterr().out
