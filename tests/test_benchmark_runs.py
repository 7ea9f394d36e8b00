"""The benchmarks that start trainers (benchmarks.recipes.run_recipe) stop them when they are stopped."""

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
