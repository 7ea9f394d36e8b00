"""--network auto: the member of airbench's family a time budget buys the most accuracy with."""

import json
import os

import pytest

from estimator.networks import family, registry
from estimator.training import config, flags
from estimator.training.hparams import HParams

# A hand-made table: the small member learns fast and plateaus low, the large one needs epochs.
TABLE = {
    "airbench94 x0.5": ((1, 0.60), (4, 0.80), (16, 0.86)),
    "airbench94": ((1, 0.55), (4, 0.84), (16, 0.90)),
    "airbench96": ((8, 0.88), (32, 0.92)),
}


def test_expected_accuracy_is_interpolated_in_log_epochs_held_beyond_and_absent_below():
    assert family.expected_accuracy("airbench94", 4, TABLE) == 0.84
    assert family.expected_accuracy("airbench94", 2, TABLE) == pytest.approx(0.695)  # halfway in log(epochs)
    assert family.expected_accuracy("airbench94", 100, TABLE) == 0.90  # no gain assumed past the table
    assert family.expected_accuracy("airbench96", 7.9, TABLE) is None  # not measured that short
    assert family.expected_accuracy("airbench94 x0.25", 4, TABLE) is None  # not in this table


def choice(budget, rates, **kw):
    member, record = family.choose(budget, {k: (v, "timed") for k, v in rates.items()}, 50000, table=TABLE, **kw)
    return member.name, record


def test_a_fast_machine_takes_a_larger_member_and_a_slow_one_a_smaller():
    # 300 s: 240 s of training (0.85 x 300 - 15). Slow: 800 and 220 images/s give 3.8 and 1.1 epochs.
    slow = {"airbench94 x0.5": 800.0, "airbench94": 220.0, "airbench96": 160.0}
    name, record = choice(300, slow)
    assert name == "airbench94 x0.5" and record["training_secs_estimated"] == 240.0
    by_name = {c["member"]: c for c in record["candidates"]}
    assert by_name["airbench94 x0.5"]["epochs"] == pytest.approx(3.84)
    assert by_name["airbench96"]["expected_accuracy"] is None  # 0.77 epochs: below its table
    # Fast: 4,000 and 1,400 images/s give 19.2 and 6.7 epochs: the larger member wins.
    fast = {"airbench94 x0.5": 4000.0, "airbench94": 1400.0, "airbench96": 1000.0}
    assert choice(300, fast)[0] == "airbench94"
    # 30 minutes on the fast machine: airbench96's 30 epochs beat airbench94's 42 (held at 0.90).
    assert choice(1800, fast)[0] == "airbench96"
    # With progressive resizing each step costs less: more epochs in the same time.
    _, cheaper = choice(300, fast, step_cost=0.5)
    assert cheaper["candidates"][0]["epochs"] == pytest.approx(2 * 19.2)
    # Below every member's table: the fastest.
    name, record = choice(60, {"airbench94": 220.0, "airbench96": 160.0})
    assert name == "airbench94" and record["why"].startswith("no member reaches")


def test_only_members_that_could_win_are_timed():
    # 0.85 x 300 - 15 = 240 s; at 1.5x 160 images/s airbench96 would train 1.2 epochs, its table starts at 8.
    assert not family.worth_timing("airbench96", 300, 160.0, 50000, table=TABLE)
    assert family.worth_timing("airbench96", 1800, 400.0, 50000, table=TABLE)
    assert not family.worth_timing("airbench94 x0.25", 1800, 400.0, 50000, table=TABLE)  # no table rows
    assert family.estimated_rate("airbench94", 1000.0) == pytest.approx(1000.0 * 67.4 / 240.7)


def test_the_members_multiply_adds_are_the_profilers():
    for m in family.MEMBERS:
        hp = HParams(
            data_dir="", job_dir="", network="airbench", group_depth=m.group_depth, width_multiplier=m.width_multiplier
        )
        assert round(registry.forward_flops(hp) / 1e6, 1) == m.forward_mflops, m.name


def test_the_shipped_table_is_the_benchmarks():
    """family.TABLE holds the benchmark's runs (benchmarks/results/network_table*.json), every member
    measured, in increasing epochs and accuracy that does not fall by more than a run's noise."""
    from tests.helpers import REPO

    rows = []
    for name in ("network_table.json", "network_table_long.json"):
        with open(os.path.join(REPO, "benchmarks", "results", name)) as f:
            rows += json.load(f)["rows"]
    for row in rows:
        assert (row["epochs"], round(row["accuracy"], 4)) in family.TABLE[row["member"]], row
    for m in family.MEMBERS:
        points = family.TABLE[m.name]
        assert list(points) == sorted(points) and len(points) >= 2, m.name
        assert all(b[1] > a[1] - 0.005 for a, b in zip(points, points[1:])), m.name
    assert family.REFERENCE in family.TABLE


def parse(tmp_path, data_dir, *extra):
    argv = ["--data-dir", data_dir, "--job-dir", str(tmp_path / "job"), "--num-gpus", "0", "--lr-schedule", "cosine"]
    argv += list(extra)
    args = flags.build_parser().parse_args(argv)
    args.given = flags.given_flags(argv)
    return args


def test_auto_needs_a_budget_and_takes_no_resnet_flags(mini_records, tmp_path):
    with pytest.raises(ValueError, match="--network auto chooses the network for --time-budget: give a budget"):
        config.resolve(parse(tmp_path, mini_records, "--network", "auto"), environ={}, gpus_visible=0)
    with pytest.raises(ValueError, match="--num-layers 20 shape a ResNet; --network auto has its own"):
        config.resolve(
            parse(tmp_path, mini_records, "--network", "auto", "--time-budget", "5m", "--num-layers", "20"),
            environ={},
            gpus_visible=0,
        )


def test_a_restarted_job_keeps_its_choice_without_timing_anything(mini_records, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    record = {"family": "airbench", "member": "airbench96", "candidates": [], "precision": "bf16"}
    (job / "hparams.json").write_text(json.dumps({"hparams": {"network_choice": record, "precision_probe": {}}}))
    args = parse(tmp_path, mini_records, "--network", "auto", "--time-budget", "5m", "--precision", "auto")
    hp = config.resolve(args, environ={"CIFAR10_CACHE_DIR": str(tmp_path / "no-probes")}, gpus_visible=0)
    assert (hp.network, hp.group_depth, hp.width_multiplier, hp.crop_padding, hp.cutout) == ("airbench", 3, 1.0, 4, 12)
    assert hp.precision == "bf16" and hp.network_choice["kept_from_the_first_run"] is True
    assert not os.path.exists(str(tmp_path / "no-probes"))


def test_flags_given_by_hand_narrow_the_family_or_override_its_augmentation(mini_records, tmp_path, monkeypatch):
    monkeypatch.setenv("CIFAR10_CACHE_DIR", str(tmp_path / "cache"))
    args = parse(
        tmp_path,
        mini_records,
        "--network",
        "auto",
        "--time-budget",
        "90s",
        "--precision",
        "fp32",
        "--group-depth",
        "2",
        "--width-multiplier",
        "0.5",
        "--cutout",
        "6",
        "--train-batch-size",
        "64",
    )
    hp = config.resolve(args, environ={}, gpus_visible=0)
    # Only the member of that shape was a candidate, timed (the reference); the cutout given wins.
    assert [c["member"] for c in hp.network_choice["candidates"]] == ["airbench94 x0.5"]
    assert hp.network_choice["candidates"][0]["speed"] == "timed"
    assert (hp.network, hp.width_multiplier, hp.crop_padding, hp.cutout) == ("airbench", 0.5, 2, 6)
    # A network named by hand is no choice at all.
    named = config.resolve(
        parse(tmp_path, mini_records, "--network", "airbench", "--time-budget", "90s"), environ={}, gpus_visible=0
    )
    assert named.network_choice is None and named.width_multiplier == 1.0


@pytest.mark.slow
def test_an_auto_job_records_its_choice_plans_its_views_and_a_restart_keeps_them(mini_records, tmp_path):
    from tests.helpers import run_main

    job = str(tmp_path / "job")
    flags = ["--data-dir", mini_records, "--job-dir", job] + (
        "--num-gpus 0 --network auto --train-batch-size 64 --eval-batch-size 339 --time-budget 60s "
        "--lr-schedule onecycle --precision auto --eval-flip-tta --eval-tta --seed 1 --health-checks off"
    ).split()
    env = {"CIFAR10_CACHE_DIR": str(tmp_path / "cache")}
    code, out = run_main(*flags, env=env)
    assert code == 0, out[-3000:]
    recorded = json.load(open(os.path.join(job, "hparams.json")))["hparams"]
    choice = recorded["network_choice"]
    member = family.member(choice["member"])
    assert recorded["network"] == "airbench" and choice["budget_secs"] == 60.0
    assert (recorded["group_depth"], recorded["width_multiplier"]) == (member.group_depth, member.width_multiplier)
    assert (recorded["crop_padding"], recorded["cutout"]) == (member.crop_padding, member.cutout)
    assert {c["member"] for c in choice["candidates"]} == {m.name for m in family.MEMBERS}
    assert "--network auto: %s" % member.name in out
    # The job's last lines: what it reached, where its records and exports are, how to look at it.
    assert "Done: test accuracy " in out and "results:     %s/results.json" % job in out
    assert "exports:     %s/export/final/" % job in out and "TensorBoard: tensorboard --logdir %s" % job in out
    results = json.load(open(os.path.join(job, "results.json")))
    assert results["wall_secs"] <= 61.0, results
    # The views the end's share (15% of 60 s: 9 s) had room for, and the others said to be dropped.
    views = results["final_views"]
    assert views[0] == "plain" and set(views[1:]) | set(results.get("final_views_dropped", [])) == {
        "flip",
        "translations",
    }
    assert ("accuracy_flip_tta" in results) == ("flip" in views)
    assert ("accuracy_tta" in results) == ("translations" in views)
    # A restart keeps the choice (and its checkpoints), whatever the speed now.
    code, out = run_main(*flags, env=env)
    assert code == 0, out[-3000:]
    again = json.load(open(os.path.join(job, "hparams.json")))["hparams"]
    assert again["network_choice"]["member"] == member.name and again["network_choice"]["kept_from_the_first_run"]
