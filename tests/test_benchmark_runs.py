"""The benchmarks that start trainers: they stop them when they are stopped, and time them as they say."""

import argparse
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO


def processes_mentioning(text: str):
    """PIDs of this machine's processes whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            pass  # ended while we looked
    return pids


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %g s waiting for %s" % (timeout, what))
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the trainer through /proc")
def test_sigterm_to_a_recipe_benchmark_stops_its_trainer(mini_records, tmp_path):
    # A recipe that would train for far longer than the test: the benchmark is stopped mid-run.
    recipe = tmp_path / "long.args"
    recipe.write_text(
        "--num-gpus 0\n--num-layers 8\n--train-steps 100000\n--train-batch-size 32\n"
        "--eval-policy final\n--save-checkpoints-secs 3600\n--log-every-n-steps 1000\n"
    )
    jobs, out = tmp_path / "jobs", tmp_path / "recipes.json"
    bench = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.recipes", "--data-dir", mini_records, "--job-root", str(jobs)]
        + ["--out", str(out), str(recipe)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The trainer writes hparams.json once its flags are resolved, before it trains.
        wait_for(lambda: (jobs / "long" / "hparams.json").exists(), 180, "the trainer to start")
        trainers = [pid for pid in processes_mentioning(str(jobs)) if pid != bench.pid]
        assert trainers, "no trainer process names %s" % jobs
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
        # Gone with it (the benchmark waited for it), not left training for the rest of its steps.
        assert processes_mentioning(str(jobs)) == []
        assert not out.exists()  # no result from an interrupted run
    finally:
        for pid in processes_mentioning(str(jobs)):
            os.kill(pid, signal.SIGKILL)
        if bench.poll() is None:
            bench.kill()


def test_the_cloud_storage_benchmark_counts_a_jobs_uploads_and_prints_a_line_for_either_place(tmp_path):
    from benchmarks import cloud_storage as bench
    from tests.cloud_storage import UPLOADS

    sent = [
        ("benchmark/jobs/cpu_5min-1/events.out.tfevents.1.vm", 1_000_000),
        ("benchmark/jobs/cpu_5min-1/model.ckpt-8.index", 500_000),
        ("benchmark/jobs/cpu_5min-1/events.out.tfevents.1.vm", 1_200_000),
        ("benchmark/jobs/cpu_5min-10/events.out.tfevents.2.vm", 9_000_000),  # another job: not counted
    ]
    (tmp_path / UPLOADS).write_text("".join('{"object": "%s", "bytes": %d}\n' % entry for entry in sent))
    counted = bench.sent(str(tmp_path), "benchmark/jobs/cpu_5min-1/")
    assert counted == {"uploaded_mb": 2.7, "event_file_uploads": 2, "event_file_mb": 2.2}
    assert bench.sent(str(tmp_path / "no-server"), "benchmark/") == {
        "uploaded_mb": 0.0,
        "event_file_uploads": 0,
        "event_file_mb": 0.0,
    }
    row = dict(place="local", recipe="cpu_5min.args", round=1, network="airbench94 x0.75", precision="bf16")
    row.update(global_step=1071, wall_seconds=293.46, accuracy=0.88466, checkpoint_save_secs=0.1)
    row.update(final_secs_reserved=22.0, final_secs=10.31)
    middle = "airbench94 x0.75       bf16  steps  1071  wall  293.5 s  test acc 0.8847  checkpoint save  0.10 s"
    assert bench._line(row) == "local   cpu_5min.args          round 1  %s  end reserved  22.0 s, used  10.3 s" % middle
    row.update(place="gs://", **counted)
    assert bench._line(row) == (
        "gs://   cpu_5min.args          round 1  %s  end reserved  22.0 s, used  10.3 s  "
        "uploaded   2.7 MB, event files  2.2 MB in 2" % middle
    )


def test_the_gc_benchmark_times_a_commands_start_and_exit_and_refuses_a_failed_one():
    from benchmarks import gc_cost

    script = "import time; time.sleep(0.2); print('INFO:tensorflow: first', flush=True); time.sleep(1.0)"
    row = gc_cost.timed_command([sys.executable, "-c", script])
    # Three spans of one run, each rounded to the millisecond: the two parts within the whole, to the rounding.
    assert row["start_secs"] + row["exit_secs"] <= row["wall_secs"] + 0.002
    # The sleep after the last line is the exit's: all of it but the moment this process took to read the line.
    assert row["start_secs"] >= 0.2 and row["exit_secs"] >= 0.5
    # The CPU is the command's own: its sleeps are not counted, its busy second is.
    assert row["cpu_secs"] < 0.5 * row["wall_secs"]
    busy = "import time; end = time.process_time() + 1.0\nwhile time.process_time() < end: pass"
    assert gc_cost.timed_command([sys.executable, "-c", busy])["cpu_secs"] >= 1.0
    assert gc_cost.timed_command([sys.executable, "-c", "print('no log line')"])["start_secs"] is None
    with pytest.raises(SystemExit, match="exited with 3: run it by hand to see why"):
        gc_cost.timed_command([sys.executable, "-c", "raise SystemExit(3)"])


def test_the_job_cost_benchmark_alternates_two_checkouts_in_their_own_directories(tmp_path):
    from benchmarks import job_cost

    # Each "trainer" makes the job dir it was given (the last flag; it must be new), writes where it ran and, in
    # its results.json, a rate from the variable --env gives every job.
    script = (
        "import json, os, sys; os.makedirs(sys.argv[-1]); open(sys.argv[-1] + '/cwd', 'w').write(os.getcwd()); "
        "json.dump({'examples_per_sec': float(os.environ['RATE'])}, open(sys.argv[-1] + '/results.json', 'w'))"
    )
    ways = {"this": ([sys.executable, "-c", script], None), "against": ([sys.executable, "-c", script], str(tmp_path))}
    runs = job_cost.time_rounds(ways, ["--seed", "1"], str(tmp_path / "work"), rounds=2, env={"RATE": "512.5"})
    assert [len(rows) for rows in runs.values()] == [2, 2]  # a fresh job dir each time, or makedirs fails
    assert open(tmp_path / "work" / "job" / "cwd").read() == str(tmp_path)  # the last: the other checkout's
    table = job_cost.medians(runs)
    assert sorted(table) == ["against", "this"] and sorted(table["this"]) == sorted(job_cost.KEYS)
    assert table["this"]["start_secs"] is None  # no log line
    assert table["this"]["examples_per_sec"] == table["against"]["examples_per_sec"] == 512.5
    for bad in ("=1", "RATE"):
        with pytest.raises(SystemExit) as e:
            job_cost.main(["--data-dir", "d", "--against", "a", "--work-dir", str(tmp_path), "--env", bad])
        assert e.value.code == 2


def test_the_network_table_trains_every_recipe_for_fixed_epochs_without_its_budget_or_views(tmp_path):
    from benchmarks import network_table

    for recipe in network_table.RECIPE_OF_DEPTH.values():
        with open(os.path.join(REPO, recipe)) as f:
            assert "--time-budget" in f.read()
        words = open(network_table.recipe_without_budget(os.path.join(REPO, recipe), str(tmp_path))).read().split()
        assert not set(network_table.DROPPED) & set(words) and "--lr-schedule" in words
    # The trainer takes what remains with the benchmark's own flags (a refused flag would fail every run).
    from estimator.training import flags

    parsed = flags.build_parser().parse_args(
        ["@" + str(tmp_path / "cpu_5min.args"), "--data-dir", "d", "--job-dir", "j", "--network", "airbench"]
        + ["--train-epochs", "4", "--no-eval-tta", "--no-eval-flip-tta", "--export", "false"]
    )
    flags.validate(parsed, flags.Cluster())
    assert (parsed.train_epochs, parsed.time_budget, parsed.tta_fraction, parsed.optimizer) == (4.0, None, 1.0, "sgd")


def test_the_environment_benchmark_reads_each_environment_as_its_name_python_and_variables():
    from benchmarks import environment_speed

    given = environment_speed.environment("itex graph=/v/bin/python ITEX_ONEDNN_GRAPH=1 X=a=b")
    assert given == ("itex graph", "/v/bin/python", {"ITEX_ONEDNN_GRAPH": "1", "X": "a=b"})
    for bad in ("stock", "=/v/bin/python", "stock=", "itex=/v/bin/python ITEX_ONEDNN_GRAPH"):
        with pytest.raises(argparse.ArgumentTypeError, match="give NAME=PYTHON"):
            environment_speed.environment(bad)
