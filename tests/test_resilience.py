"""Jobs that survive: signals, a busy or foreign job dir, full and read-only disks, bad numbers, Spot VMs.

Every test runs real trainers (``python -m estimator.cifar10_main``) and sends them real signals;
full and read-only file systems are real mounts (tmpfs, a read-only bind mount).
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
import yaml

from benchmarks import faults
from estimator.common import processes
from estimator.resilience import jobdir
from tests.helpers import AIPLATFORM_SCHEMAS, MINI_SHA256, REPO, check, in_process, run_joined, train_here

SMALL = "--num-gpus 0 --num-layers 8 --train-batch-size 32 --eval-batch-size 339 --seed 3 --health-checks off".split()


def snapshot(directory):
    """path -> sha256 of every file under ``directory``: what "left exactly as it was" compares."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--learning-rate", "nan"], "argument --learning-rate: 'nan' is not a finite number"),
        (["--weight-decay", "inf"], "argument --weight-decay: 'inf' is not a finite number"),
        (["--momentum=-inf"], "argument --momentum: '-inf' is not a finite number"),
        (["--label-smoothing", "NaN"], "argument --label-smoothing: 'NaN' is not a finite number"),
        (["--health-every-n-steps", "0"], "--health-every-n-steps 0 must be positive\\.$"),
        (["--batch-norm-decay", "1"], "--batch-norm-decay 1.0 must be in \\(0, 1\\), e.g. 0.997\\.$"),
        (["--num-gpus=-1"], "--num-gpus -1 must be 0 or more\\.$"),
        (["--save-checkpoints-steps", "0"], "--save-checkpoints-steps 0 must be positive\\.$"),
        (
            ["--width-multiplier", "0.3"],
            "--width-multiplier 0.3 must be positive with 8 x it a whole number, e.g. 0.5, 1, 1.5, 2\\.$",
        ),
        (["--cutout", "33"], "--cutout 33 must be a square side from 0 to 32 pixels"),
        (["--cutout", "8", "--no-use-distortion-for-training"], "--cutout 8 is a training distortion"),
        (["--crop-padding=-1"], "--crop-padding -1 must be from 0 to 16 pixels"),
        # Retired options: one line saying so, whatever their value.
        (["--flip", "alternate"], "--flip was retired in 0.3.0 \\(alternating flips did not beat random ones"),
        (["--bias-lr-scale", "64"], "--bias-lr-scale was retired in 0.3.0 \\(airbench's 64x rate"),
        (["--ensemble=2"], "--ensemble was retired in 0.3.0 \\(two networks of half the epochs"),
        (["--whiten-eps", "5e-3"], "--whiten-eps was retired in 0.3.0 \\(ten times airbench's whitening floor"),
        (["--activation", "relu"], "--activation was retired in 0.3.0 \\(ReLU for the airbench network's GELU"),
        (["--ema-decay", "0.99"], "--ema-decay was retired in 0.4.0 \\(an average of the weights cost 0.30 points"),
        (["--zero-init-residual"], "--zero-init-residual was retired in 0.4.0 \\(zero-initialised residual units"),
        (["--health-loss-window=10"], "--health-loss-window was retired in 0.5.0 \\(the health rules' thresholds"),
    ],
)
def test_numbers_are_checked_at_parse_time(mini_records, tmp_path, capsys, flags, message):
    from estimator import cifar10_main

    with pytest.raises(SystemExit) as e:
        cifar10_main.parse(["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0"] + flags)
    assert e.value.code == 2
    assert re.search(message, capsys.readouterr().err, re.M)
    assert not os.path.exists(str(tmp_path / "j"))


@pytest.mark.slow
@pytest.mark.bf16_kernels
def test_a_job_dir_of_another_network_is_refused_and_left_as_it_was(mini_records, tmp_path, capsys):
    job = str(tmp_path / "job")
    code, out = train_here(
        capsys, mini_records, job, *SMALL, *"--train-steps 2 --eval-policy final --export false".split()
    )
    assert code == 0, out[-3000:]
    # As versions 0.2.0 and 0.3.0 wrote it: with the options 0.3.0 and 0.4.0 retired, off. They do not stop a
    # restart (below).
    path = os.path.join(job, "hparams.json")
    record = json.load(open(path))
    record["hparams"].update(
        activation="relu", whiten_eps=0.0005, bias_lr_scale=1.0, ensemble=1, flip="random", ema_decay=0.0
    )
    record["hparams"].update(zero_init_residual=False, health_loss_window=200, health_class_ratio=0.25)
    with open(path, "w") as f:
        json.dump(record, f)
    # One that trained with a retired option switched on is refused, and left as it was.
    retired = str(tmp_path / "retired")
    shutil.copytree(job, retired)
    record["hparams"].update(ensemble=2, ema_decay=0.99)
    with open(os.path.join(retired, "hparams.json"), "w") as f:
        json.dump(record, f)
    before = snapshot(retired)
    from estimator import cifar10_main

    restart = ["--data-dir", mini_records, *SMALL, "--train-steps", "4"]  # refused before it trains
    code, _, out = in_process(cifar10_main.main, capsys, *restart, "--job-dir", retired)
    assert code == 2 and snapshot(retired) == before
    refusal = (
        "was trained with --ensemble 2 (retired in 0.3.0: two networks of half the epochs each tied one network at "
        "30 minutes) and --ema-decay 0.99 (retired in 0.4.0: an average of the weights cost 0.30 points at 5 minutes "
        "(ResNet-14) and 0.73 at 30 (ResNet-14 x2)): this version cannot %s it. Use another --job-dir."
    )
    assert refusal % "restart" in out, out[-2000:]
    # Nor exports it (its checkpoints' averaged weights are what it would have served).
    from estimator import export

    assert export.main(["--job-dir", retired, "--output", str(tmp_path / "e")]) == 1
    assert (refusal % "export or serve") in capsys.readouterr().err
    assert snapshot(retired) == before and not os.path.exists(str(tmp_path / "e"))
    before = snapshot(job)
    other = "--num-layers 14 --width-multiplier 1.5 --optimizer muon --lookahead".split()
    code, _, out = in_process(cifar10_main.main, capsys, *restart, *other, "--job-dir", job)
    assert code == 2
    assert (
        "holds another network's checkpoints: --num-layers is 14 here, 8 in its hparams.json; --width-multiplier "
        "is 1.5 here, 1.0 in its hparams.json; --optimizer is muon here, sgd in its hparams.json; --lookahead is "
        "true here, false in its hparams.json. Use another --job-dir, or this job's own flags (--num-layers 8 "
        "--width-multiplier 1.0 --optimizer sgd --lookahead false)" in out
    ), out[-2000:]
    assert "Traceback" not in out and snapshot(job) == before
    # What may change on a restart stays free: more steps, another rate and precision.
    code, out = train_here(
        capsys,
        mini_records,
        job,
        *SMALL,
        *"--train-steps 4 --learning-rate 0.05 --precision bf16 --eval-policy final --export false".split(),
    )
    assert code == 0, out[-3000:]


def start_trainer(data_dir, job_dir, *flags):
    command = processes.trainer_command(["--data-dir", data_dir, "--job-dir", job_dir, *SMALL, *flags])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


@pytest.mark.slow
def test_a_second_trainer_is_refused_and_a_dead_holder_is_taken_over(mini_records, tmp_path, capsys):
    job = str(tmp_path / "job")
    first = start_trainer(mini_records, job, "--train-steps", "100000", "--log-every-n-steps", "5")
    try:
        lines, _ = faults.run_until(first, r"step \d+/100000")
        assert first.poll() is None, "".join(lines)
        lock = json.load(open(os.path.join(job, jobdir.LOCK_FILE)))
        assert lock["pid"] == first.pid
        code, out = train_here(capsys, mini_records, job, *SMALL, "--train-steps", "10")  # refused at once, not waiting
        assert code == 75
        assert re.search(
            r"error: %s is in use by another trainer \(pid %d on \S+ since 20\d\d-" % (re.escape(job), first.pid), out
        )
        assert "Traceback" not in out
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # gone without releasing its lock
        first.wait()
    assert os.path.exists(os.path.join(job, jobdir.LOCK_FILE))
    code, out = train_here(
        capsys, mini_records, job, *SMALL, *"--train-steps 10 --eval-policy final --export false".split()
    )
    assert code == 0, out[-3000:]
    assert "taking over %s from a trainer that is gone (pid %d" % (job, first.pid) in out
    assert "its process no longer runs" in out and not os.path.exists(os.path.join(job, jobdir.LOCK_FILE))


def test_a_lock_on_another_host_is_stale_only_without_heartbeat(tmp_path):
    job = str(tmp_path / "job")
    os.makedirs(job)
    now = time.time()
    held = {"host": "another-host", "pid": 1, "since": now - 1000, "heartbeat": now - 10}
    with open(os.path.join(job, jobdir.LOCK_FILE), "w") as f:
        json.dump(held, f)
    with pytest.raises(jobdir.JobDirBusyError, match="in use by another trainer \\(pid 1 on another-host since"):
        jobdir.JobDirLock(job).acquire()
    said = []
    with jobdir.JobDirLock(job, log=said.append, stale_secs=5) as lock:
        assert json.load(open(os.path.join(job, jobdir.LOCK_FILE)))["pid"] == os.getpid()
        assert lock.record["host"] != "another-host"
    assert said and "no heartbeat for 1" in said[0] and not os.path.exists(os.path.join(job, jobdir.LOCK_FILE))


def test_the_lock_on_gcs_holds_and_is_released(gcs):
    from estimator.common import storage

    job = gcs + "/jobs/a"
    with jobdir.JobDirLock(job):
        holder = json.loads(storage.read_text(job + "/" + jobdir.LOCK_FILE))
        assert holder["pid"] == os.getpid()
        with pytest.raises(jobdir.JobDirBusyError, match="in use by another trainer"):
            jobdir.JobDirLock(job, stale_secs=1e9).acquire()
    assert not storage.exists(job + "/" + jobdir.LOCK_FILE)


@pytest.mark.slow
def test_a_signal_saves_the_step_reached_and_the_same_command_resumes(mini_records, tmp_path):
    """SIGTERM, then SIGINT to the resumed run: each ends it with its status and one line naming the checkpoint at
    the step reached, and the same command resumes from the step after it, to the end."""
    job = str(tmp_path / "job")
    flags = ["--train-steps", "60", "--log-every-n-steps", "5", "--eval-policy", "final"]
    resumed_from = None
    for sig, code, reached in ((signal.SIGTERM, 143, 20), (signal.SIGINT, 130, 40)):
        trainer = start_trainer(mini_records, job, *flags)
        lines, reader = faults.run_until(trainer, r"step %d\d/60" % (reached // 10))
        trainer.send_signal(sig)
        assert trainer.wait(timeout=60) == code
        reader.join(timeout=10)
        out = "".join(lines)
        if resumed_from is not None:  # the first progress line of a restart is its first step
            assert re.search(r"step (\d+)/60", out).group(1) == str(resumed_from + 1), out[-3000:]
        said = re.search(
            r"interrupted by %s: stopped at step (\d+); checkpoint (\S+); no results\.json\. The same "
            r"command resumes: python -m estimator\.cifar10_main" % signal.Signals(sig).name,
            out,
        )
        assert said, out[-3000:]
        resumed_from = int(said.group(1))
        assert resumed_from >= faults.last_step(lines) >= reached, out[-3000:]
        assert said.group(2).endswith("model.ckpt-%d" % resumed_from)
        assert not os.path.exists(os.path.join(job, "results.json")) and "Traceback" not in out
        assert not os.path.exists(os.path.join(job, jobdir.LOCK_FILE))
    again = start_trainer(mini_records, job, *flags)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out[-3000:]
    assert re.search(r"step (\d+)/60", out).group(1) == str(resumed_from + 1)
    assert json.load(open(os.path.join(job, "results.json")))["global_step"] == 60


@pytest.mark.slow
def test_faults_at_every_stage_are_survived(mini_records, tmp_path):
    """SIGTERM, SIGINT and SIGKILL during training, a checkpoint save, the final evaluation and the exports
    (benchmarks.faults; docs/faults.md has the table of a run)."""
    # Three of the benchmark's eight (the signal test above covers SIGTERM and SIGINT mid-training, test_cluster's
    # killed chief SIGKILL mid-training): CI's time; python -m benchmarks.faults runs all eight.
    names = ("SIGTERM during a checkpoint save", "SIGTERM during the final evaluation", "SIGKILL during the exports")
    chosen = [f for f in faults.FAULTS if f[0] in names]
    assert len(chosen) == 3
    rows = faults.run_matrix(mini_records, str(tmp_path), chosen)
    for row in rows:
        assert row["survived"], row
        assert row["exit_code"] == row["expected_exit_code"], row
        if row["signal"] != "SIGKILL":
            assert row["said"] and row["steps_lost"] == 0, row  # the checkpoint is at the step reached


def mount(*args):
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def full_dir(tmp_path):
    """A real file system with 96 KiB: hparams.json fits, a checkpoint does not."""
    path = str(tmp_path / "full")
    os.makedirs(path)
    result = mount("-t", "tmpfs", "-o", "size=96k", "tmpfs", path)
    if result.returncode != 0:
        pytest.skip(
            "cannot mount a tmpfs here (%s): needs root (CI and the project's machines have it)" % result.stderr.strip()
        )
    yield path
    subprocess.run(["umount", path], check=True)


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only bind mount of an empty directory."""
    source, path = str(tmp_path / "source"), str(tmp_path / "ro")
    os.makedirs(source)
    os.makedirs(path)
    if mount("--bind", source, path).returncode != 0 or mount("-o", "remount,bind,ro", path).returncode != 0:
        pytest.skip("cannot make a read-only bind mount here: needs root (CI and the project's machines have it)")
    yield path
    subprocess.run(["umount", path], check=True)


@pytest.mark.slow
def test_a_full_job_dir_is_one_line_and_leaves_no_partial_files(mini_records, full_dir, capsys):
    job = os.path.join(full_dir, "job")
    code, out = train_here(capsys, mini_records, job, *SMALL, "--train-steps", "5")
    assert code == 74, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and job in errors[0], out[-3000:]
    assert "Traceback" not in out
    left = [n for n in os.listdir(job) if "tmp" in n or "temp" in n] if os.path.isdir(job) else []
    assert left == []
    code, out = train_here(capsys, mini_records, job, *SMALL, "--train-steps", "5", "--verbose")
    assert code == 74 and "Traceback" in out  # --verbose shows where


@pytest.mark.slow
def test_a_read_only_job_dir_and_data_dir_are_one_line(mini_records, mini_archive, read_only_dir, capsys):
    code, out = train_here(capsys, mini_records, read_only_dir + "/job", *SMALL, "--train-steps", "5")
    assert code == 74, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Read-only file system" in errors[0] and read_only_dir in errors[0], out[-2000:]
    assert "Traceback" not in out
    code, out = run_joined(
        "generate_cifar10_tfrecords",
        "--data-dir",
        read_only_dir + "/data",
        "--source",
        mini_archive,
        "--sha256",
        MINI_SHA256,
    )
    assert code != 0 and "Read-only file system" in out and "Traceback" not in out, out[-2000:]


def vertex_config(capsys, kind, yaml_file, output, *flags):
    """``python -m estimator.vertex KIND`` for one of the repository's YAML files, in this process (its
    parser and writer; test_vertex runs the command itself); (exit code, output)."""
    from estimator import vertex

    config = os.path.join(REPO, yaml_file)
    argv = [
        kind,
        "--config",
        config,
        "--image-uri",
        "us-central1-docker.pkg.dev/p/r/cifar10-estimator:gpu",
        "--base-output-dir",
        "gs://b/jobs/j",
        "--output",
        output,
        *flags,
        "--",
        "--data-dir",
        "gs://b/data",
        "--train-steps",
        "1000",
    ]
    try:
        code = vertex.main(argv)
    except SystemExit as e:  # argparse's refusals
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_spot_vms_and_scheduling_fields_reach_the_job_config(tmp_path, capsys):
    out = str(tmp_path / "job.yaml")
    code, said = vertex_config(
        capsys, "custom-job", "cmle_config.yaml", out, "--spot", "--restart-job-on-worker-restart", "--timeout", "8h"
    )
    assert code == 0, said
    job = yaml.safe_load(open(out))
    assert job["scheduling"] == {"strategy": "SPOT", "restartJobOnWorkerRestart": True, "timeout": "28800s"}
    assert check(job, {"$ref": "GoogleCloudAiplatformV1CustomJobSpec"}, schemas=AIPLATFORM_SCHEMAS) == []
    code, said = vertex_config(capsys, "hp-tuning-job", "hptuning_config.yaml", out, "--spot")
    assert code == 0, said
    tuning = yaml.safe_load(open(out))
    assert tuning["trialJobSpec"]["scheduling"] == {"strategy": "SPOT"}
    assert check(tuning, {"$ref": "GoogleCloudAiplatformV1HyperparameterTuningJob"}, schemas=AIPLATFORM_SCHEMAS) == []
    code, said = vertex_config(capsys, "custom-job", "cmle_config.yaml", out, "--timeout", "soon")
    assert code == 2 and "'soon' is not a positive duration" in said


def test_a_job_dir_of_other_group_widths_is_refused_naming_the_flags_that_fit_it(tmp_path):
    """--group-widths shapes the checkpoint: hparams.json records it as a list, the flag gives a tuple."""
    from tests.helpers import hp

    def recorded(widths):
        with open(str(tmp_path / "hparams.json"), "w") as f:
            json.dump({"hparams": {"network": "airbench", "num_layers": 8, "group_widths": widths}}, f)

    recorded([32, 192, 192])
    jobdir.check_same_network(hp(job_dir=str(tmp_path), network="airbench", group_widths=(32, 192, 192)))
    with pytest.raises(jobdir.ForeignJobDirError) as refused:
        jobdir.check_same_network(hp(job_dir=str(tmp_path), network="airbench"))
    assert str(refused.value).endswith(
        "--group-widths is None here, 32 192 192 in its hparams.json. Use another --job-dir, or this job's own "
        "flags (--group-widths 32 192 192)."
    )
    recorded(None)
    with pytest.raises(jobdir.ForeignJobDirError, match=r"this job's own flags \(no --group-widths\)\.$"):
        jobdir.check_same_network(hp(job_dir=str(tmp_path), network="airbench", group_widths=(64, 128, 128)))
