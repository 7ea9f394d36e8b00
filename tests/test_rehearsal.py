"""Every job docs/cloud.md shows, written by ``estimator.vertex`` and run here as Vertex AI runs it
(``python -m estimator.vertex local-run``): each to a trained step, and a reported metric where it reports."""

import json
import os
import re
import sys

import pytest
import yaml

from estimator import vertex as vertex_cli
from estimator.cloud import rehearsal
from estimator.common import cluster as cluster_lib
from estimator.tuning import spec as spec_lib
from tests.helpers import REPO, SMALL_AIRBENCH, run_module

IMAGE = "us-central1-docker.pkg.dev/p/r/cifar10-estimator:cpu"
BUCKET = "gs://my-bucket"
# The 5-minute recipe in 15 s on small batches: a job of the recipe's shape that trains in seconds.
SHORT_RECIPE = ["--recipe", "cpu_5min", "--time-budget", "15s", "--train-batch-size", "64", "--eval-batch-size", "339"]


def write(tmp_path, kind, config, *flags, trainer=()):
    out = str(tmp_path / ("%s.yaml" % kind))
    argv = [kind, "--config", config, "--image-uri", IMAGE, "--output", out, *flags, "--", *trainer]
    assert vertex_cli.main(argv) == 0
    return out


def local_run(tmp_path, config, data_dir, *extra, image=IMAGE):
    """The rehearsal as a user runs it: the image stands for this Python, the bucket for a local folder."""
    bucket = tmp_path / "bucket"
    bucket.mkdir(exist_ok=True)
    if not (bucket / "cifar-10-data").exists():
        os.symlink(data_dir, str(bucket / "cifar-10-data"))
    code, out, err = run_module(
        "estimator.vertex",
        "local-run",
        config,
        "--image",
        "%s=%s" % (image, sys.executable),
        "--map",
        "%s=%s" % (BUCKET, bucket),
        "--work-dir",
        str(tmp_path / "rehearsal"),
        *extra,
    )
    return code, out + err, str(bucket)


def reported(out):
    [line] = [x for x in out.splitlines() if x.startswith("Reported to Vertex AI: ")]
    return dict(kv.split("=", 1) for kv in line.split(": ", 1)[1].split())


@pytest.mark.slow
def test_a_one_machine_spot_job_of_a_recipe_trains_where_vertex_ai_says(mini_records, tmp_path):
    """docs/cloud.md's one-machine job (cpu_config.yaml, a recipe, on Spot VMs): Vertex AI gives a job of one
    machine a TF_CONFIG naming it chief of a cluster of one; the trainer trains alone, plans its budget, and
    writes to AIP_CHECKPOINT_DIR under the base output directory."""
    config = write(
        tmp_path,
        "custom-job",
        REPO + "/cpu_config.yaml",
        "--spot",
        "--timeout",
        "1h",
        "--base-output-dir",
        BUCKET + "/jobs/j1",
        trainer=SHORT_RECIPE + ["--data-dir", BUCKET + "/cifar-10-data"],
    )
    assert yaml.safe_load(open(config))["scheduling"] == {"strategy": "SPOT", "timeout": "3600s"}
    code, out, bucket = local_run(tmp_path, config, mini_records)
    assert code == 0, out[-3000:]
    job_dir = os.path.join(bucket, "jobs", "j1", "checkpoints")
    assert "AIP_CHECKPOINT_DIR=%s/" % job_dir in out and "AIP_MODEL_DIR=%s/jobs/j1/model/" % bucket in out
    results = json.load(open(os.path.join(job_dir, "results.json")))
    assert results["global_step"] >= 1 and results["time_budget_secs"] == 15.0
    # The final model also where Vertex AI's model registry takes it from (gcloud ai models upload).
    model_dir = os.path.join(bucket, "jobs", "j1", "model")
    assert results["model_export_dir"] == model_dir + "/" and os.path.exists(os.path.join(model_dir, "saved_model.pb"))
    assert sorted(os.listdir(os.path.join(model_dir, "variables"))) == sorted(
        os.listdir(os.path.join(results["final_export"], "variables"))
    )
    hp = json.load(open(os.path.join(job_dir, "hparams.json")))["hparams"]
    assert hp["cluster"]["spec"] == {} and hp["recipe"] == "cpu_5min"
    # The recipe trains its final model on training and validation: nothing to report a tuning metric on.
    assert "Reported to Vertex AI: nothing" in out


@pytest.mark.slow
def test_a_trial_on_a_parameter_server_cluster_validates_while_it_trains_and_reports_each_validation(
    mini_records, tmp_path
):
    """cmle_config.yaml's shape (a chief, workers, a parameter server, an evaluator) on CPU machines, as a trial
    of a study: on Vertex AI the chief only trains (TensorFlow's run_chief), so the evaluator validates each
    new checkpoint, export/best is chosen from those validations, and the chief reports each of them to the
    tuning service (and its own last one), as the legacy master did."""
    config_yaml = tmp_path / "cluster.yaml"
    machines = {
        "scaleTier": "CUSTOM",
        "masterType": "n1-standard-4",
        "workerType": "n1-standard-4",
        "workerCount": 1,
        "parameterServerType": "n1-highmem-8",
        "parameterServerCount": 1,
        "evaluatorType": "n1-standard-4",
        "evaluatorCount": 1,
        "hyperparameters": {
            "goal": "MAXIMIZE",
            "hyperparameterMetricTag": "accuracy",
            "maxTrials": 2,
            "params": [{"parameterName": "learning-rate", "type": "DOUBLE", "minValue": 0.02, "maxValue": 0.2}],
        },
    }
    config_yaml.write_text(yaml.safe_dump({"trainingInput": machines}))
    trainer = SMALL_AIRBENCH + ["--train-steps", "300", "--save-checkpoints-steps", "50", "--eval-throttle-secs", "1"]
    trainer += ["--keep-checkpoint-max", "10"]  # every checkpoint kept for an evaluator that falls behind
    trainer += ["--data-dir", BUCKET + "/cifar-10-data", "--health-checks", "off"]
    config = write(tmp_path, "hp-tuning-job", str(config_yaml), "--base-output-dir", BUCKET + "/s", trainer=trainer)
    code, out, bucket = local_run(tmp_path, config, mini_records, "--trial", "3")
    assert code == 0, out[-3000:]
    assert "[ps/0]" in out and "[worker/0]" in out and "[evaluator/0]" in out
    job_dir = os.path.join(bucket, "s", "3", "checkpoints")
    hp = json.load(open(os.path.join(job_dir, "hparams.json")))["hparams"]
    assert set(hp["cluster"]["spec"]) == {"chief", "worker", "ps"} and hp["num_workers"] == 2
    # The evaluator's validations, during training: TensorBoard's eval_validation has a point before the end.
    from tests.helpers import events

    steps = sorted({step for step, _ in events(os.path.join(job_dir, "eval_validation")).get("accuracy", [])})
    assert len(steps) >= 2 and steps[0] < 300, steps
    relayed = [line for line in out.splitlines() if "[validation, by the evaluator]" in line and "[chief/0]" in line]
    measured = [line for line in out.splitlines() if line.startswith(("Measurement: step", "Reported to Vertex AI"))]
    assert relayed and len(measured) >= 2, out[-3000:]
    metric = reported(out)
    assert 0 <= float(metric["accuracy"]) <= 1 and int(metric["global_step"]) >= 300
    assert os.listdir(os.path.join(job_dir, "export", "best"))
    # The rehearsal ends the job with its chief, as Vertex AI may: the chief waited for the evaluator's
    # validation of its final checkpoint (written after every exporter), relayed it and recorded it.
    [final] = re.findall(r"\[chief/0\] .*Waiting for the evaluator's validation of step (\d+)", out) or [out[-3000:]]
    last = json.load(open(os.path.join(job_dir, "eval_validation", "last_validation.json")))
    results = json.load(open(os.path.join(job_dir, "results.json")))
    assert last["global_step"] == int(final) >= 300  # async workers may pass max_steps by a step
    assert results["validation_accuracy"] == pytest.approx(last["accuracy"])
    assert int(metric["global_step"]) == last["global_step"] and float(metric["accuracy"]) == pytest.approx(
        last["accuracy"]
    )


@pytest.mark.slow
def test_a_trial_of_a_study_of_a_recipe_trains_on_the_training_split_and_reports(mini_records, tmp_path):
    config = write(
        tmp_path,
        "hp-tuning-job",
        REPO + "/hptuning_recipe.yaml",
        "--base-output-dir",
        BUCKET + "/studies/s1",
        "--network-member",
        "airbench94 x0.25",
        trainer=SHORT_RECIPE + ["--data-dir", BUCKET + "/cifar-10-data"],
    )
    code, out, bucket = local_run(tmp_path, config, mini_records, "--trial", "7", "--param", "crop-padding=3")
    assert code == 0, out[-3000:]
    job_dir = os.path.join(bucket, "studies", "s1", "7", "checkpoints")
    hp = json.load(open(os.path.join(job_dir, "hparams.json")))["hparams"]
    assert hp["train_subsets"] == ["train"] and hp["cluster"]["trial"] == "7"
    assert (hp["width_multiplier"], hp["crop_padding"]) == (0.25, 3)  # the member, then the trial's parameter
    assert hp["learning_rate"] == pytest.approx((0.375 * 1.5) ** 0.5, rel=1e-5)  # mid-range on its log scale
    results = json.load(open(os.path.join(job_dir, "results.json")))
    metric = reported(out)
    assert float(metric["accuracy"]) == pytest.approx(results["validation_accuracy"], abs=1e-6)
    # Each trial is a new machine: every trial names one cache under the study's directory (the config's
    # flags, the same for all), where the next reads what the first measured (test_network_choice shows it).
    assert hp["probe_cache"] == os.path.join(bucket, "studies", "s1", "probe-cache")


def _job(**pool):
    base = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1"}
    base.update(pool)
    return {"workerPoolSpecs": [base]}


CONTAINER = {"imageUri": IMAGE, "command": ["python", "-m", "estimator.cifar10_main"], "args": []}


@pytest.mark.parametrize(
    "config,message",
    [
        ({"workerPoolSpecs": [dict(_job(containerSpec=CONTAINER)["workerPoolSpecs"][0]), {}]}, "an empty pool"),
        (_job(), "workerPoolSpecs[0] needs exactly one of pythonPackageSpec and containerSpec"),
        (_job(containerSpec=CONTAINER, replicaCount="2"), "the chief: its replicaCount must be 1"),
        (_job(containerSpec=dict(CONTAINER, imageUri="other:1")), "the image other:1 is not mapped: name the Python"),
        (_job(containerSpec=dict(CONTAINER, args=["--data-dir=gs://b/d"])), "map it to a directory of this machine"),
    ],
)
def test_the_rehearsal_refuses_what_gcloud_or_vertex_ai_would(tmp_path, config, message):
    with pytest.raises(spec_lib.SpecError) as e:
        rehearsal.rehearse(config, {IMAGE: "python"}, {}, str(tmp_path))
    assert message in str(e.value)


def test_an_engine_runs_the_image_itself_with_vertex_ai_s_command_variables_and_folders():
    """--engine docker: the pool's command in place of the image's ENTRYPOINT, on the host's network (the
    cluster's addresses), Vertex AI's variables by name (their values from the engine's environment, which the
    cluster sets per task), the mapped folders and the rehearsal's own at their own paths."""
    pool = {"containerSpec": dict(CONTAINER, args=["--data-dir=gs://b/d", "--recipe", "cpu_5min"])}
    argv = rehearsal._command(pool, {}, {"gs://b": "/m/b"}, ["--lr=0.1"], "docker", ["/m/b", "/w"])
    variables = ["TF_CONFIG", "CLUSTER_SPEC", "CLOUD_ML_TRIAL_ID", "CLOUD_ML_HP_METRIC_FILE"]
    variables += ["AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"]
    assert argv == (
        ["docker", "run", "--rm", "--network", "host", "--entrypoint", "python"]
        + [word for name in variables for word in ("--env", name)]
        + ["--volume", "/m/b:/m/b", "--volume", "/w:/w", IMAGE, "-m", "estimator.cifar10_main"]
        + ["--data-dir=/m/b/d", "--recipe", "cpu_5min", "--lr=0.1"]
    )
    # A pool with GPUs gets them: Docker's --gpus, Podman's CDI devices of the NVIDIA Container Toolkit.
    gpu_pool = dict(pool, machineSpec={"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4"})
    gpu_pool["machineSpec"]["acceleratorCount"] = 2
    docker = rehearsal._command(gpu_pool, {}, {"gs://b": "/m/b"}, [], "docker", [])
    assert docker[:9] == ["docker", "run", "--rm", "--network", "host", "--entrypoint", "python", "--gpus", "2"]
    podman = rehearsal._command(gpu_pool, {}, {"gs://b": "/m/b"}, [], "/usr/bin/podman", [])
    assert podman[7:11] == ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"]
    # An image --image names runs as that Python, engine or not.
    assert rehearsal._command(pool, {IMAGE: "/py"}, {"gs://b": "/m/b"}, [], "docker", [])[:3] == [
        "/py",
        "-m",
        "estimator.cifar10_main",
    ]


@pytest.mark.parametrize(
    "pool,engine,message",
    [
        ({"containerSpec": CONTAINER}, "no-such-engine-here", "--engine no-such-engine-here: no such command here"),
        (
            {"pythonPackageSpec": {"executorImageUri": "e:1", "packageUris": ["/p.tar.gz"], "pythonModule": "m"}},
            "true",
            "workerPoolSpecs[0].pythonPackageSpec: the package route was retired in 0.6.0",
        ),
    ],
)
def test_an_engine_that_is_not_here_or_an_executor_image_is_refused(tmp_path, pool, engine, message):
    """An engine runs containers of the package; a pool of the retired package route is refused."""
    with pytest.raises(spec_lib.SpecError) as e:
        rehearsal.rehearse(_job(**pool), {}, {}, str(tmp_path), engine=engine)
    assert message in str(e.value)


def test_relative_folders_are_the_same_folders_for_every_replica(tmp_path, monkeypatch):
    """--map work/bucket and --work-dir given relative: a replica that runs elsewhere (an installed package
    runs from the rehearsal's directory, a container mounts them) still finds them."""
    monkeypatch.chdir(tmp_path)
    env = "os.environ['AIP_CHECKPOINT_DIR'], os.environ['CLOUD_ML_HP_METRIC_FILE']"
    show = "import os, sys; print('seen', sys.argv[1], %s)" % env
    command = {"imageUri": IMAGE, "command": ["python", "-c", show], "args": ["gs://b/data"]}
    job = dict(_job(containerSpec=command), baseOutputDirectory={"outputUriPrefix": "gs://b/jobs/j"})
    result = rehearsal.rehearse(
        job, {IMAGE: sys.executable}, {"gs://b": "bucket"}, "rehearsal", out=open(os.devnull, "w")
    )
    assert result.exit_code == 0, result.log
    [seen] = [line.split()[1:] for line in result.log.splitlines() if "seen " in line]
    bucket, work = str(tmp_path / "bucket"), str(tmp_path / "rehearsal")
    assert seen == [bucket + "/data", bucket + "/jobs/j/checkpoints/", work + "/chief-0/output.metrics"]


def test_a_trial_gets_its_parameters_as_vertex_ai_passes_them():
    study = {
        "parameters": [
            {
                "parameterId": "learning-rate",
                "doubleValueSpec": {"minValue": 0.01, "maxValue": 1.0},
                "scaleType": "UNIT_LOG_SCALE",
            },
            {"parameterId": "crop-padding", "integerValueSpec": {"minValue": "1", "maxValue": "4"}},
            {"parameterId": "lr-schedule", "categoricalValueSpec": {"values": ["cosine", "onecycle"]}},
        ]
    }
    assert rehearsal.default_parameters(study) == {"learning-rate": "0.1", "crop-padding": "2", "lr-schedule": "cosine"}


def test_one_machine_is_a_single_process_whatever_tf_config_calls_it():
    """Vertex AI names a job's only machine the chief of a cluster of one (AI Platform: master); an evaluator's
    pool, which TF_CONFIG never lists, shows in CLUSTER_SPEC."""
    alone = json.dumps({"cluster": {"chief": ["cmle-training-workerpool0-ab-0:2222"]}, "task": {"type": "chief"}})
    assert cluster_lib.from_environment({"TF_CONFIG": alone, "CLOUD_ML_TRIAL_ID": "4"}) == cluster_lib.Cluster(
        trial="4"
    )
    master = json.dumps({"cluster": {"master": ["h:2222"]}, "task": {"type": "master", "index": 0}})
    assert not cluster_lib.from_environment({"TF_CONFIG": master}).distributed
    pools = json.dumps({"cluster": {"workerpool0": ["h:2222"], "workerpool3": ["e:2222"]}})
    with_evaluator = cluster_lib.from_environment({"TF_CONFIG": alone, "CLUSTER_SPEC": pools})
    assert with_evaluator.distributed and with_evaluator.task_type == "chief" and with_evaluator.evaluator
    two = json.dumps({"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, "task": {"type": "worker", "index": 0}})
    assert cluster_lib.from_environment({"TF_CONFIG": two}).distributed
    assert not cluster_lib.from_environment({"TF_CONFIG": two}).evaluator  # nobody to wait for
