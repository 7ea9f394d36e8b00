"""Distributed training with real processes on 127.0.0.1 (slow: each test runs a cluster)."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from estimator.cloud.local_cluster import ClusterError, LocalCluster, free_ports
from estimator.common import cluster as cluster_lib
from estimator.common.cluster import tf_config
from tests.helpers import REPO

pytestmark = pytest.mark.slow

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def trainer(data_dir, job_dir, steps, *extra):
    return [
        "--data-dir",
        data_dir,
        "--job-dir",
        job_dir,
        *"--num-gpus 0 --num-layers 8 --train-batch-size 32 --eval-batch-size 100 --train-steps".split(),
        str(steps),
        *"--log-every-n-steps 10 --eval-throttle-secs 0 --export false".split(),
    ] + list(extra)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_finished(cluster, job, steps):
    results = json.load(open(os.path.join(job, "results.json")))
    # Asynchronous replicas (chief and workers) each finish the step they are
    # in: the global step may end up to one step per replica past --train-steps.
    workers = sum(1 for role, _ in cluster.tasks if role in ("master", "chief", "worker"))
    final = results["global_step"]
    assert steps <= final <= steps + workers and results["eval_examples"] == 1017
    # The evaluated step is the last checkpoint's. Not always the one its name says: the chief names a
    # checkpoint by the step it saw, and a worker's step can land on the parameter server before the
    # variables are read (a checkpoint named 400 held step 401, on a slower CPU).
    assert tf.train.load_variable(tf.train.latest_checkpoint(job), "global_step") == final
    chief = cluster.task("master" if ("master", 0) in cluster.tasks else "chief")
    assert re.search(
        r"Evaluation \[validation\] at step %d" % final,
        chief.log() + (cluster.task("evaluator").log() if ("evaluator", 0) in cluster.tasks else ""),
    )
    for task in cluster.tasks.values():
        assert not alive(task.process.pid), task.name  # every process ended, ps included
    return results


def test_sync_cluster_finishes_without_hanging(mini_records, tmp_path):
    job = str(tmp_path / "job")
    cluster = LocalCluster(
        trainer(mini_records, job, 40, "--sync", "--save-checkpoints-steps", "20"), workers=1, ps=1, env=ENV, out=None
    )
    with cluster:
        assert cluster.start().wait(timeout=240, grace=60) == 0
    # The stock SyncReplicasOptimizer hook held the chief's session open for the coordinator's 120 s grace
    # after training, until it gave up on the aggregation thread and said so (at any CPU's speed).
    assert "Coordinator stopped with threads still running" not in cluster.task("master").log()
    results = json.load(open(os.path.join(job, "results.json")))
    assert results["global_step"] == 40
    assert "SyncReplicasV2: replicas_to_aggregate=2" in cluster.task("master").log()
    # The first update waited for the worker, which the Estimator starts 5 s late: it trained from step 1.
    assert re.search(r"step 1/40 ", cluster.task("worker").log())
    hp = json.load(open(os.path.join(job, "hparams.json")))
    assert hp["hparams"]["num_workers"] == 2 and hp["hparams"]["sync"] is True
    # One global step is one update from both workers' batches: 4068 // (32 * 2) = 63 steps/epoch.
    assert hp["derived"]["learning_rate_boundaries"][0] == 63 * 82


def test_a_killed_worker_rejoins_a_killed_chief_resumes_and_the_evaluator_validates(mini_records, tmp_path):
    """One Vertex AI-shaped job (chief, worker, parameter server, evaluator), two preemptions: the worker is
    killed mid-run and rejoins; later the chief is killed after a checkpoint and resumes from the one its
    state file names; the evaluator validates the checkpoints as they come, and the job trains to its last step."""
    job = str(tmp_path / "job")
    # --verbose: the Estimator's own "Saving checkpoints" and "Restoring parameters" lines.
    cluster = LocalCluster(
        trainer(mini_records, job, 300, "--save-checkpoints-steps", "50", "--verbose"),
        workers=1,
        ps=1,
        evaluator=True,  # an evaluator needs the Vertex AI role name, chief (a master evaluates itself)
        chief_role="chief",
        env=ENV,
        out=None,
    )
    with cluster:
        cluster.start()
        # The chief is paused from its first step until the worker has rejoined, so that no CPU is fast
        # enough to finish the 300 steps alone before the kills below.
        cluster.wait_for("chief", 0, r"step \d+/\d+ ", timeout=120)
        os.killpg(cluster.task("chief").process.pid, signal.SIGSTOP)
        cluster.wait_for("worker", 0, r"step \d+/\d+ ", timeout=120)
        first = cluster.task("worker")
        cluster.kill("worker", 0)  # SIGKILL mid-run
        assert first.process.returncode == -9
        cluster.start_task("worker", 0)
        cluster.wait_for("worker", 0, r"step \d+/\d+ ", timeout=120)  # it rejoined and trains
        resumed = len(cluster.task("chief").lines)
        os.killpg(cluster.task("chief").process.pid, signal.SIGCONT)
        # Logged once the checkpoint and its state file are written.
        cluster.wait_for(
            "chief",
            0,
            r"Calling checkpoint listeners after saving checkpoint (5\d|[1-9]\d\d)\.",
            timeout=180,
            after=resumed,
        )
        cluster.kill("chief", 0)
        # What a restart must restore: the checkpoint the state file names (a
        # kill between writing a checkpoint and recording it leaves the older one).
        latest = int(tf.train.latest_checkpoint(job).rsplit("-", 1)[1])
        cluster.start_task("chief", 0)
        restored = cluster.wait_for("chief", 0, r"Restoring parameters from .*model\.ckpt-(\d+)", timeout=180)
        assert int(restored.group(1)) == latest >= 50
        assert cluster.wait(timeout=300) == 0
    assert_finished(cluster, job, 300)
    assert latest < 300  # the chief was killed mid-run
    assert os.path.isdir(os.path.join(job, "eval_validation"))
    assert re.search(r"Evaluation \[validation\] at step \d+", cluster.task("evaluator").log())


def test_unreachable_parameter_server_fails_in_bounded_time(mini_records, tmp_path):
    ps, master = free_ports(2)
    spec = {"master": ["127.0.0.1:%d" % master], "ps": ["127.0.0.1:%d" % ps]}  # nothing listens on ps
    env = dict(ENV, TF_CONFIG=tf_config(spec, "master", 0))
    proc = subprocess.run(
        [sys.executable, "-m", "estimator.cifar10_main"]
        + trainer(mini_records, str(tmp_path / "job"), 10, "--ps-wait-secs", "3"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    # In bounded time: after the 3 s asked for (the run's timeout would catch a wait for ever).
    assert "parameter server ps/0 at 127.0.0.1:%d is unreachable after 3 s" % ps in proc.stderr


def test_a_failed_task_stops_everything_and_is_named_and_the_retired_command_says_where_to_go(tmp_path):
    # A bad flag makes master and worker exit 2; the ps would wait forever.
    flags = ["--data-dir", str(tmp_path / "missing"), "--job-dir", str(tmp_path / "job"), "--num-gpus", "0"]
    cluster = LocalCluster(flags, workers=1, ps=1, env=ENV, out=None)
    with pytest.raises(ClusterError, match=r"^(master|worker)/0 failed with exit code 2; stopped the other tasks") as e:
        cluster.start().wait(timeout=120)
    assert "Run generate_cifar10_tfrecords.py" in str(e.value)
    assert all(task.process.poll() is not None for task in cluster.tasks.values())
    port = int(cluster.spec["ps"][0].rsplit(":", 1)[1])
    with pytest.raises(cluster_lib.UnreachableError):  # the ps is gone
        cluster_lib.wait_for_parameter_servers(cluster_lib.Cluster(spec={"ps": ["127.0.0.1:%d" % port]}), 1)
    # python -m estimator.local_cluster, retired in 0.6.0: one line naming the command that runs a cluster now.
    retired = [sys.executable, "-m", "estimator.local_cluster", "--workers", "1", "--", "--num-gpus", "0"]
    proc = subprocess.run(retired, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: python -m estimator.local_cluster was retired in 0.6.0: write the job's config (python -m "
        "estimator.vertex custom-job) and run it here with python -m estimator.vertex local-run (docs/cloud.md)."
    ]


def test_wait_for_reports_an_early_exit(tmp_path):
    cluster = LocalCluster(
        ["--data-dir", str(tmp_path), "--job-dir", str(tmp_path), "--num-gpus", "0"], workers=0, ps=0, env=ENV, out=None
    )
    with cluster:
        cluster.start()
        with pytest.raises(ClusterError, match="master/0 exited with 2"):
            cluster.wait_for("master", 0, "never printed", timeout=60)
