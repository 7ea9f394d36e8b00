"""--network auto: the member of airbench's family a time budget buys the most accuracy with."""

import glob
import json
import os

import pytest

from estimator.budget import choice as network_choice
from estimator.budget import family
from estimator.budget import job as budget_job
from estimator.common import durations
from estimator.common.options import Optimizer
from estimator.networks import registry
from estimator.training import flags
from estimator.training.hparams import MUON_BELOW_EPOCHS, MUON_SHORT_BELOW_EPOCHS, MUON_SHORT_RATE, HParams

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


MUON = {"airbench94": ((1, 0.65), (4, 0.86))}


def test_muons_table_where_measured_and_sgds_past_its_last_point():
    def muon(name, epochs):
        return family.expected_accuracy(name, epochs, TABLE, Optimizer.MUON, MUON)

    assert muon("airbench94", 1) == 0.65 and muon("airbench94", 4) == 0.86
    assert muon("airbench94", 16) == 0.90  # past Muon's last point: SGD's points (they tied at 8)
    assert muon("airbench94", 8) == pytest.approx(0.88)  # halfway in log(epochs) between 0.86 and SGD's 0.90
    assert muon("airbench94", 0.9) is None  # below its first measured epochs
    assert muon("airbench94 x0.5", 4) == family.expected_accuracy("airbench94 x0.5", 4, TABLE) == 0.80  # unmeasured
    assert family.expected_accuracy("airbench94", 4, TABLE, Optimizer.SGD, MUON) == 0.84


def test_optimizer_auto_expects_each_member_by_the_optimizer_its_epochs_take():
    """240 s at 800 and 220 images/s: x0.5's 3.84 epochs (SGD 0.794) against airbench94's 1.06 (SGD 0.556, Muon
    0.803 by this table): SGD keeps x0.5; with Muon below 2 epochs airbench94's fewer epochs win."""
    slow = {"airbench94 x0.5": (800.0, "timed"), "airbench94": (220.0, "timed")}
    muon = {"airbench94": ((1, 0.80), (4, 0.88))}

    def below_two(epochs):
        return Optimizer.MUON if epochs < 2 else Optimizer.SGD

    assert family.choose(300, slow, 50000, seconds(240), table=TABLE, muon_table=muon)[0].name == "airbench94 x0.5"
    kw = dict(table=TABLE, optimizer_for=below_two, muon_table=muon)
    member, record = family.choose(300, slow, 50000, seconds(240), **kw)
    by_name = {c["member"]: c for c in record["candidates"]}
    assert member.name == "airbench94" and by_name["airbench94"]["optimizer"] == "muon"
    assert by_name["airbench94"]["expected_accuracy"] == 0.8031
    assert by_name["airbench94 x0.5"]["optimizer"] == "sgd"
    assert by_name["airbench94 x0.5"]["expected_accuracy"] == 0.7941
    [line] = budget_job.choice_lines(HParams(data_dir="", job_dir="", network_choice=record))
    assert "airbench94 220 img/s (timed), 1.1 epochs, expected 80.31% with muon" in line
    assert "airbench94 x0.5 800 img/s (timed), 3.8 epochs, expected 79.41%;" in line
    # The rule the choice goes by is --optimizer auto's own: Muon below MUON_BELOW_EPOCHS.
    rule = network_choice.optimizer_for(HParams(data_dir="", job_dir="", optimizer="auto"))
    assert rule(MUON_BELOW_EPOCHS - 0.01) == Optimizer.MUON and rule(MUON_BELOW_EPOCHS) == Optimizer.SGD
    assert network_choice.optimizer_for(HParams(data_dir="", job_dir="", optimizer="muon"))(100) == Optimizer.MUON


def seconds(train_secs):
    """Every member trains ``train_secs`` (the configuration's ``training_secs`` differ by speed)."""
    return lambda rate: train_secs


def choice(train_secs, rates, **kw):
    timed = {k: (v, "timed") for k, v in rates.items()}
    member, record = family.choose(300, timed, 50000, seconds(train_secs), table=TABLE, **kw)
    return member.name, record


def test_a_fast_machine_takes_a_larger_member_and_a_slow_one_a_smaller():
    # 240 s of training. Slow: 800 and 220 images/s give 3.8 and 1.1 epochs.
    slow = {"airbench94 x0.5": 800.0, "airbench94": 220.0, "airbench96": 160.0}
    name, record = choice(240, slow)
    assert name == "airbench94 x0.5" and record["training_secs_estimated"] == 240.0
    by_name = {c["member"]: c for c in record["candidates"]}
    assert by_name["airbench94 x0.5"]["epochs"] == pytest.approx(3.84)
    assert by_name["airbench94 x0.5"]["training_secs"] == 240.0
    assert by_name["airbench96"]["expected_accuracy"] is None  # 0.77 epochs: below its table
    # Fast: 4,000 and 1,400 images/s give 19.2 and 6.7 epochs: the larger member wins.
    fast = {"airbench94 x0.5": 4000.0, "airbench94": 1400.0, "airbench96": 1000.0}
    assert choice(240, fast)[0] == "airbench94"
    # Six times the training on the fast machine: airbench96's 30 epochs beat airbench94's 42 (held at 0.90).
    assert choice(1515, fast)[0] == "airbench96"
    # With progressive resizing each step costs less: more epochs in the same time.
    _, cheaper = choice(240, fast, step_cost=0.5)
    assert cheaper["candidates"][0]["epochs"] == pytest.approx(2 * 19.2)
    # Below every member's table: the fastest.
    name, record = choice(36, {"airbench94": 220.0, "airbench96": 160.0})
    assert name == "airbench94" and record["why"].startswith("no member reaches")


def test_each_member_is_counted_the_training_its_own_end_leaves():
    """A slower member's end (its evaluations) takes longer: the training seconds are a function of its
    speed, and the choice follows them. Fast: airbench94's 6.7 epochs in 240 s (0.862) beat x0.5's 19.2
    (held at 0.86); with its end 40 s longer, its 5.6 epochs (0.855) lose."""
    fast = {"airbench94 x0.5": (4000.0, "timed"), "airbench94": (1400.0, "timed")}
    member, record = family.choose(300, fast, 50000, lambda rate: 240.0 if rate > 2000 else 200.0, table=TABLE)
    by_name = {c["member"]: c for c in record["candidates"]}
    assert member.name == "airbench94 x0.5" and by_name["airbench94"]["training_secs"] == 200.0
    assert by_name["airbench94"]["epochs"] == pytest.approx(5.6) and record["training_secs_estimated"] == 240.0
    assert family.choose(300, fast, 50000, seconds(240.0), table=TABLE)[0].name == "airbench94"


def test_only_members_whose_estimate_leaves_the_choice_open_are_timed():
    def open_ones(train_secs, reference, **estimates):
        rates = {"airbench94 x0.5": (reference, "timed")}
        rates.update({name.replace("_", " "): (rate, "estimated") for name, rate in estimates.items()})
        return family.worth_timing(rates, 50000, seconds(train_secs), table=TABLE)

    # 240 s of training. Slow: the reference's 3.84 epochs expect 0.794; airbench94 at 220 images/s even
    # 1.25x faster (1.32 epochs) expects 0.608, airbench96 nothing: both lose at either end, untimed.
    assert open_ones(240, 800.0, airbench94=220.0, airbench96=160.0) == []
    # Fast: airbench94's 6.7 epochs expect 0.853-0.872 within the spread, the reference 0.86: timed.
    assert open_ones(240, 4000.0, airbench94=1400.0, airbench96=1000.0) == ["airbench94"]
    # Both open (airbench96 at 1,700: 6.5-10.2 epochs, below its table up to 0.887): one is timed, the one
    # that could do best.
    assert open_ones(240, 4000.0, airbench94=1400.0, airbench96=1700.0) == ["airbench96"]
    # 1,515 s: airbench96 (24-38 epochs: 0.908-0.92) beats airbench94's 0.90 at either end: it wins
    # from its estimate, and neither is timed.
    assert open_ones(1515, 4000.0, airbench94=1400.0, airbench96=1000.0) == []
    assert family.worth_timing({"airbench94 x0.5": (800.0, "timed")}, 50000, seconds(240), table=TABLE) == []
    m = family.member("airbench94")
    assert m.efficiency("bf16") > m.efficiency("fp32") and m.efficiency("fp16") == m.efficiency("bf16")
    for precision in ("fp32", "bf16"):
        expected = 1000.0 * 67.4 / 240.7 * m.efficiency(precision)
        assert family.estimated_rate("airbench94", 1000.0, precision) == pytest.approx(expected)


def test_the_members_multiply_adds_are_the_profilers():
    for m in family.MEMBERS:
        hp = HParams(data_dir="", job_dir="", network="airbench", **{name: getattr(m, name) for name in family.SHAPE})
        assert round(registry.forward_flops(hp) / 1e6, 1) == m.forward_mflops, m.name


def test_the_shipped_table_is_the_benchmarks():
    """family.TABLE holds the benchmark's runs (benchmarks/results/network_table*.json), every member
    measured by them, in increasing epochs and accuracy that does not fall by more than a run's noise."""
    from tests.helpers import REPO

    rows = []
    for path in glob.glob(os.path.join(REPO, "benchmarks", "results", "network_table*.json")):
        with open(path) as f:
            rows += json.load(f)["rows"]
    assert {row["member"] for row in rows} == {m.name for m in family.MEMBERS}
    for row in rows:
        assert (row["epochs"], round(row["accuracy"], 4)) in family.TABLE[row["member"]], row
    for m in family.MEMBERS:
        points = family.TABLE[m.name]
        assert list(points) == sorted(points) and len(points) >= 2, m.name
        assert all(b[1] > a[1] - 0.005 for a, b in zip(points, points[1:])), m.name
    assert family.REFERENCE in family.TABLE


def test_muons_table_is_the_mean_of_the_benchmarks_runs():
    """family.MUON_TABLE holds the mean of the Muon runs (benchmarks/results/epochs_*muon*.json: ``benchmarks.
    network_table ... -- --optimizer muon``, any seed) at each member's epochs, each at the rate --optimizer auto
    takes for them (MUON_SHORT_RATE below MUON_SHORT_BELOW_EPOCHS, else the default), and nothing else."""
    from tests.helpers import REPO

    runs, rates = {}, set()
    for path in glob.glob(os.path.join(REPO, "benchmarks", "results", "epochs_*muon*.json")):
        with open(path) as f:
            for row in json.load(f)["rows"]:
                flags = row["extra_flags"]
                assert flags[:2] == ["--optimizer", "muon"], path
                # Rows that name no rate ran at the default of their day, airbench94_muon's 0.24.
                named = "--muon-learning-rate" in flags
                rate = float(flags[flags.index("--muon-learning-rate") + 1]) if named else MUON_SHORT_RATE
                rates.add(rate)
                short = row["epochs"] < MUON_SHORT_BELOW_EPOCHS
                if rate == (MUON_SHORT_RATE if short else HParams.muon_learning_rate):
                    runs.setdefault(row["member"], {}).setdefault(row["epochs"], []).append(row["accuracy"])
    assert {MUON_SHORT_RATE, HParams.muon_learning_rate} <= rates  # the rates compared (docs/training.md, "Muon")
    expected = {m: tuple(sorted((e, round(sum(a) / len(a), 4)) for e, a in by.items())) for m, by in runs.items()}
    assert family.MUON_TABLE == expected and set(expected) <= {m.name for m in family.MEMBERS}


def test_every_member_speed_measured_lies_within_the_spread_of_its_estimate():
    """Each efficiency ``benchmarks.probe_cost`` measured (benchmarks/results/probe_cost*.json: every CPU
    kind, natively and held to AVX2) lies within ``ESTIMATE_SPREAD`` of the member's in that precision, so
    ``worth_timing`` leaves untimed only members whose truth cannot change the choice."""
    from tests.helpers import REPO

    measured = []
    for path in glob.glob(os.path.join(REPO, "benchmarks", "results", "probe_cost*.json")):
        with open(path) as f:
            measured += [(os.path.basename(path), row) for row in json.load(f).get("members") or []]
    assert {row["precision"] for _, row in measured} == {"fp32", "bf16"}
    assert {row["member"] for _, row in measured} == {m.name for m in family.MEMBERS}
    for name, row in measured:
        ratio = row["efficiency"] / family.member(row["member"]).efficiency(row["precision"])
        assert 1 / family.ESTIMATE_SPREAD <= ratio <= family.ESTIMATE_SPREAD, (name, row)
    # One figure per member could not hold them: x0.375's span more than the spread either way (bf16 on
    # AMX, 0.39; fp32 held to AVX2, 1.00).
    spans = {}
    for _, row in measured:
        low, high = spans.get(row["member"], (row["efficiency"], row["efficiency"]))
        spans[row["member"]] = (min(low, row["efficiency"]), max(high, row["efficiency"]))
    assert max(high / low for low, high in spans.values()) > family.ESTIMATE_SPREAD**2


def parse(tmp_path, data_dir, *extra):
    argv = ["--data-dir", data_dir, "--job-dir", str(tmp_path / "job"), "--num-gpus", "0", "--lr-schedule", "cosine"]
    argv += list(extra)
    return flags.build_parser().parse_args(argv)


def test_auto_needs_a_budget_and_takes_no_resnet_flags(mini_records, tmp_path):
    with pytest.raises(ValueError, match="--network auto chooses the network for --time-budget: give a budget"):
        budget_job.resolve(parse(tmp_path, mini_records, "--network", "auto"), environ={}, gpus_visible=0)
    with pytest.raises(ValueError, match="--num-layers 20 shape a ResNet; --network auto has its own"):
        budget_job.resolve(
            parse(tmp_path, mini_records, "--network", "auto", "--time-budget", "5m", "--num-layers", "20"),
            environ={},
            gpus_visible=0,
        )


def test_a_restarted_job_keeps_its_choice_and_on_its_own_cpu_times_nothing(mini_records, tmp_path):
    from estimator.common import machine

    job = tmp_path / "job"
    job.mkdir()
    record = {"family": "airbench", "member": "airbench96", "candidates": [], "precision": "bf16"}
    here = machine.cpu_key(machine.cpu_info(environ={}))
    speed = {"train": 600.0, "eval": 2000.0, "how": "timed", "cpu": here}
    recorded = {"network_choice": record, "precision_probe": {}, "filter_gradients": {}, "speed_probe": speed}
    (job / "hparams.json").write_text(json.dumps({"hparams": recorded}))
    args = parse(tmp_path, mini_records, "--network", "auto", "--time-budget", "5m", "--precision", "auto")
    hp = budget_job.resolve(args, environ={"CIFAR10_CACHE_DIR": str(tmp_path / "no-probes")}, gpus_visible=0)
    assert (hp.network, hp.group_depth, hp.width_multiplier, hp.crop_padding, hp.cutout) == ("airbench", 3, 1.0, 4, 12)
    assert hp.precision == "bf16" and hp.network_choice["kept_from_the_first_run"] is True
    assert hp.filter_gradients == {} and hp.speed_probe == speed
    assert not os.path.exists(str(tmp_path / "no-probes"))


def test_a_job_restarted_on_another_cpu_keeps_its_graph_and_times_its_own_speed(mini_records, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    record = {"family": "airbench", "member": "airbench94 x0.25", "candidates": [], "precision": "fp32"}
    speed = {"train": 99.0, "eval": 300.0, "how": "timed", "cpu": "a Xeon|family 6 model 143|flags x|2 cores|isa any"}
    recorded = {"network_choice": record, "precision_probe": {}, "speed_probe": speed}
    (job / "hparams.json").write_text(json.dumps({"hparams": recorded}))
    flags_ = ("--network", "auto", "--time-budget", "5m", "--precision", "auto", "--train-batch-size", "16")
    hp = budget_job.resolve(
        parse(tmp_path, mini_records, *flags_), environ={"ONEDNN_MAX_CPU_ISA": "AVX2"}, gpus_visible=0
    )
    assert hp.width_multiplier == 0.25 and hp.precision == "fp32" and hp.filter_gradients is None
    assert hp.speed_probe["how"] == "timed" and hp.speed_probe["train"] != 99.0
    assert hp.speed_probe["cpu"].endswith("|isa AVX2") and hp.speed_probe["eval"] > hp.speed_probe["train"]


def test_flags_given_by_hand_narrow_the_family_or_override_its_augmentation(mini_records, tmp_path, monkeypatch):
    monkeypatch.setenv("CIFAR10_CACHE_DIR", str(tmp_path / "cache"))
    by_hand = ["--group-depth", "2", "--width-multiplier", "0.5", "--cutout", "6", "--train-batch-size", "64"]
    argv = ["--data-dir", mini_records, "--network", "auto", "--time-budget", "5m", "--precision", "fp32", *by_hand]
    args = parse(tmp_path, *argv[1:])
    hp = budget_job.resolve(args, environ={}, gpus_visible=0, given=flags.given_flags(argv))
    # Only the member of that shape was a candidate, timed (the reference); the cutout given wins.
    assert [c["member"] for c in hp.network_choice["candidates"]] == ["airbench94 x0.5"]
    assert hp.network_choice["candidates"][0]["speed"] == "timed"
    assert (hp.network, hp.width_multiplier, hp.crop_padding, hp.cutout) == ("airbench", 0.5, 2, 6)
    # A network named by hand is no choice at all.
    named = budget_job.resolve(
        parse(tmp_path, mini_records, "--network", "airbench", "--time-budget", "90s"), environ={}, gpus_visible=0
    )
    assert named.network_choice is None and named.width_multiplier == 1.0


@pytest.mark.slow
def test_an_auto_job_records_its_choice_plans_its_views_and_a_restart_keeps_them(mini_records, tmp_path):
    from tests.helpers import run_main

    job = str(tmp_path / "job")
    flags = ["--data-dir", mini_records, "--job-dir", job] + (
        "--num-gpus 0 --network auto --train-batch-size 64 --eval-batch-size 339 --time-budget 30s "
        "--lr-schedule onecycle --precision auto --eval-flip-tta --eval-tta --seed 1 --health-checks off "
        "--optimizer auto"
    ).split()
    env = {"CIFAR10_CACHE_DIR": str(tmp_path / "cache")}
    code, out = run_main(*flags, env=env)
    assert code == 0, out[-3000:]
    recorded = json.load(open(os.path.join(job, "hparams.json")))["hparams"]
    choice = recorded["network_choice"]
    member = family.member(choice["member"])
    assert recorded["network"] == "airbench" and choice["budget_secs"] == 30.0
    widths = recorded["group_widths"] and tuple(recorded["group_widths"])
    assert (recorded["group_depth"], recorded["width_multiplier"], widths) == (
        member.group_depth,
        member.width_multiplier,
        member.group_widths,
    )
    assert (recorded["crop_padding"], recorded["cutout"]) == (member.crop_padding, member.cutout)
    assert {c["member"] for c in choice["candidates"]} == {m.name for m in family.MEMBERS}
    assert "--network auto: %s" % member.name in out
    # --optimizer auto chose by the epochs the budget affords the chosen member, and said so (of the 4,068 images
    # here, many: SGD; the choice itself at either side of its line: test_muon).
    made = recorded["optimizer_choice"]
    assert (
        recorded["optimizer"] == made["optimizer"] == ("muon" if made["epochs"] < made["muon_below_epochs"] else "sgd")
    )
    at = " at rate %g" % made["muon_learning_rate"] if made["optimizer"] == "muon" else ""
    assert "--optimizer auto: %s%s (%.1f epochs in the budget" % (made["optimizer"], at, made["epochs"]) in out
    assert made.get("muon_learning_rate") == (recorded["muon_learning_rate"] if made["optimizer"] == "muon" else None)
    # The job's last lines: what it reached, where its records and exports are, how to look at it.
    assert "Done: test accuracy " in out and "results:     %s/results.json" % job in out
    assert "exports:     %s/export/final/" % job in out and "TensorBoard: tensorboard --logdir %s" % job in out
    results = json.load(open(os.path.join(job, "results.json")))
    # The views the end's share (15% of 30 s: 4.5 s) had room for, and the others said to be dropped.
    views = results["final_views"]
    assert views[0] == "plain" and set(views[1:]) | set(results.get("final_views_dropped", [])) == {
        "flip",
        "translations",
    }
    assert ("accuracy_flip_tta" in results) == ("flip" in views)
    assert ("accuracy_tta" in results) == ("translations" in views)
    # A restart keeps the choice (and so its checkpoints), whatever the speed now: the configuration a restart
    # resolves from the hparams.json this run wrote (a restart's training: tests/test_resilience.py).
    again, _ = budget_job.parse(flags, environ=env)
    assert again.network_choice["member"] == member.name and again.network_choice["kept_from_the_first_run"]
    assert again.optimizer == made["optimizer"] and again.optimizer_choice["kept_from_the_first_run"]


# fp32 training images/s of x0.375 and x0.75 against x0.5's, held to AVX2 on a Zen 5 (docs/speed.md).
X0375_RATIO, X075_RATIO = 1525 / 938, 483 / 938


class SlowCpu:
    """An AVX2-only EPYC as the speed probes see it, on a simulated clock: each member's fp32 training
    images/s as measured there (x0.25 1,304, x0.5 509, airbench94 155; evaluation 3.4x), a training step
    of 512 images taking the seconds those imply. Its ``time_network`` runs the real probe's bounded loop
    (``machine.seconds_per_run``) on a session whose steps advance the clock. x0.375 and x0.75 were not
    measured there: their images/s are x0.5's times their ratio to it held to AVX2 on a Zen 5."""

    TRAIN = {0.25: 1304.0, 0.375: 509.0 * X0375_RATIO, 0.5: 509.0, 0.75: 509.0 * X075_RATIO, 1.0: 155.0}

    def __init__(self):
        self.clock = 0.0
        self.timed = []

    def session(self, secs_per_run):
        cpu = self

        class Session:
            def run(self, fetch):
                cpu.clock += secs_per_run

        return Session()

    def time_network(self, hp, precision_, steps=None, warmup=None, image_size=32, max_secs=None, evaluate=True):
        from estimator.budget import probes as speed_probes
        from estimator.common import machine

        self.timed.append((hp.width_multiplier, hp.group_depth, hp.train_batch_size, evaluate))
        rate = self.TRAIN[hp.width_multiplier] * (0.7 if hp.group_depth == 3 else 1.0)
        self.clock += 1.0  # building the graph
        bounds = dict(steps=speed_probes.PROBE_STEPS, clock=lambda: self.clock)
        train_secs = speed_probes.PROBE_SECS if max_secs is None else max_secs
        train = machine.seconds_per_run(
            self.session(hp.train_batch_size / rate), None, warmup=1, max_secs=train_secs, **bounds
        )
        if not evaluate:
            return {"train": hp.train_batch_size / train}
        inference = machine.seconds_per_run(
            self.session(hp.eval_batch_size / rate / 3.4),
            None,
            warmup=1,
            max_secs=speed_probes.PROBE_SECS / 3,
            **bounds,
        )
        return {"train": hp.train_batch_size / train, "eval": hp.eval_batch_size / inference}


def _recipe_values(tmp_path, mini_records, budget, cache):
    """The 5-minute recipe's HParams with ``budget`` as the configuration has them before choosing a member,
    for the full stand-in's 50,000 training images, and the flags given by hand."""
    argv = ["@" + os.path.join(os.path.dirname(family.__file__), "..", "recipes", "cpu_5min.args")]
    argv += ["--data-dir", mini_records, "--job-dir", str(tmp_path / "job"), "--time-budget", budget]
    argv += ["--probe-cache", cache]
    # Resolved for the reference member named (its own speed cached apart, and only a cheap 10 s budget's
    # worth: nothing timed under 2 minutes), then made the question again.
    named = flags.build_parser().parse_args(argv + ["--network", "airbench", "--precision", "fp32"])
    named.time_budget = 10.0
    hp = budget_job.resolve(named, environ={}, gpus_visible=0)
    hp = hp.replace(num_train_examples=50000, speed_probe=None, network="auto", precision="auto")
    return hp.replace(time_budget=durations.parse(budget)), flags.given_flags(argv)


EPYC = {"model": "AMD EPYC", "family": "25", "model_number": "1", "flags": {"avx2", "fma"}, "cores": 2, "isa": ""}


@pytest.mark.parametrize("budget", ["5m", "30m"])
def test_a_first_run_on_the_slowest_cpu_chooses_in_seconds_on_a_simulated_clock(
    mini_records, tmp_path, monkeypatch, budget
):
    # With 11 fixed steps per member and every member that could reach its table timed, this first run
    # spent 77 s of its 300 before training (airbench94 alone 36 s): now at most 10.
    from estimator.budget import probes as speed_probes

    cpu = SlowCpu()
    hp, given = _recipe_values(tmp_path, mini_records, budget, str(tmp_path / "cache"))
    monkeypatch.setattr(speed_probes, "time_network", cpu.time_network)
    member, record, probe, speed = network_choice._measure_and_choose(hp, EPYC, given)
    assert cpu.clock <= 10.0, (cpu.clock, cpu.timed)
    assert probe == {} and record["precision"] == "fp32"  # no native bf16: nothing timed for it
    by_name = {c["member"]: c for c in record["candidates"]}
    assert by_name["airbench94 x0.5"]["speed"] == "timed" and by_name["airbench94 x0.5"]["images_per_sec"] == 509.0
    # airbench96 cannot reach its table in either budget. Of the members whose estimate leaves the choice
    # open, the one that could do best is timed, one only: in 5 minutes x0.375 (x0.25 could win too), in
    # 30 x0.75 (8-12 epochs; airbench94's 5-8 could too, but less), at 128 images a step.
    assert by_name["airbench96"]["speed"].startswith("estimated from airbench94 x0.5")
    timed = {"5m": "airbench94 x0.375", "30m": "airbench94 x0.75"}[budget]
    assert {c["member"] for c in record["candidates"] if c["speed"] == "timed"} == {"airbench94 x0.5", timed}
    expected = {"5m": "airbench94 x0.375", "30m": "airbench94 x0.75"}[budget]
    assert member.name == expected and speed["train"] == pytest.approx(by_name[expected]["images_per_sec"], abs=0.1)
    assert speed["eval"] == pytest.approx(3.4 * speed["train"], rel=0.01)
    # Only the reference's evaluation is timed (beside its training, at the job's batches): the other
    # member's training alone, at its probe batch, its evaluation planned at the reference's ratio.
    width = {"5m": 0.375, "30m": 0.75}[budget]
    assert cpu.timed == [(0.5, 2, 512, True), (width, 2, 512 if width < 0.5 else 128, False)]
    assert speed["how"] == "timed" and speed["eval_how"] == "at airbench94 x0.5's ratio to training"
    # The same command again: everything it timed is cached, nothing is timed.
    before = cpu.clock
    assert network_choice._measure_and_choose(hp, EPYC, given)[0] == member and cpu.clock == before


def test_a_budget_too_short_for_probes_chooses_from_estimates_and_says_so(mini_records, tmp_path, monkeypatch):
    from estimator.budget import probes as speed_probes

    cache = str(tmp_path / "cache")
    hp, given = _recipe_values(tmp_path, mini_records, "90s", cache)
    monkeypatch.setattr(speed_probes, "time_network", lambda *a, **k: pytest.fail("nothing is timed in 90 s"))
    member, record, probe, speed = network_choice._measure_and_choose(hp, EPYC, given)
    assert {c["speed"] for c in record["candidates"]} == {"estimated from airbench94 x0.5, " + family.ASSUMED}
    assert speed["how"].endswith(family.ASSUMED) and member.name == "airbench94 x0.25"
    assert (record["precision"], probe) == ("fp32", {})
    # Where bf16 is native, the family's faster precision everywhere it was measured, untimed.
    amx = dict(EPYC, model="Xeon", family="6", model_number="143", flags={"avx2", "amx_bf16", "avx512_bf16"})
    member, record, probe, speed = network_choice._measure_and_choose(hp, amx, given)
    assert (record["precision"], probe, member.name) == ("bf16", {}, "airbench94 x0.25")
    # What an earlier, longer job timed is used: figures of this CPU, for free.
    monkeypatch.setattr(speed_probes, "time_network", SlowCpu().time_network)
    long_hp, long_given = _recipe_values(tmp_path, mini_records, "5m", cache)
    network_choice._measure_and_choose(long_hp, EPYC, long_given)
    monkeypatch.setattr(speed_probes, "time_network", lambda *a, **k: pytest.fail("cached"))
    _, record, _, _ = network_choice._measure_and_choose(hp, EPYC, given)
    assert {c["member"]: c["speed"] for c in record["candidates"]}["airbench94 x0.5"] == "timed"


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_a_studys_trials_share_what_the_first_measured(mini_records, tmp_path, monkeypatch, request, where):
    # Trials of a study (CLOUD_ML_TRIAL_ID, each its own job dir; on Vertex AI each its own machine, whose
    # trials estimator.vertex gives --probe-cache gs://BASE/probe-cache) time nothing twice.
    from estimator.budget import probes as speed_probes
    from estimator.common import storage

    base = request.getfixturevalue("gcs") + "/study" if where == "gcs" else str(tmp_path / "study")
    cpu = SlowCpu()
    monkeypatch.setattr(speed_probes, "time_network", cpu.time_network)
    argv = ["--network", "auto", "--time-budget", "5m", "--train-batch-size", "64", "--eval-batch-size", "100"]
    argv += ["--probe-cache", storage.join(base, "probe-cache")]
    first = budget_job.resolve(parse(tmp_path, mini_records, *argv), environ={"CLOUD_ML_TRIAL_ID": "1"}, gpus_visible=0)
    timed = list(cpu.timed)
    assert timed and first.job_dir.endswith("/job/1")
    second = budget_job.resolve(
        parse(tmp_path, mini_records, *argv), environ={"CLOUD_ML_TRIAL_ID": "2"}, gpus_visible=0
    )
    assert cpu.timed == timed and second.job_dir.endswith("/job/2")
    assert second.network_choice == first.network_choice and second.speed_probe == first.speed_probe
    assert storage.exists(storage.join(base, "probe-cache", speed_probes.CACHE_FILE))


def test_a_member_of_other_group_widths_is_spelled_and_parsed_as_its_flags(mini_records, tmp_path):
    """A study's trials train the member a recipe chose from its flags: each group's filters as --group-widths."""
    from estimator import cifar10_main

    flags = family.member("airbench94 32/192/192").flags()
    assert flags == [
        "--network", "airbench", "--group-depth", "2", "--width-multiplier", "1",
        "--group-widths", "32", "192", "192", "--crop-padding", "2", "--cutout", "0",
    ]  # fmt: skip
    assert "--group-widths" not in family.member("airbench94 x0.5").flags()
    hp = cifar10_main.parse(["--data-dir", mini_records, "--job-dir", str(tmp_path), "--num-gpus", "0"] + flags)
    assert hp.group_widths == (32, 192, 192) and hp.width_multiplier == 1.0
