"""Trainer flags, their validation, flag files and TF_CONFIG."""

import argparse
import json
import os
import re

import pytest

from estimator import cifar10_main
from estimator.budget import job as budget_job
from estimator.common import cluster as cluster_lib
from estimator.training import config, flags, settings
from estimator.training import hparams as hparams_lib
from tests.helpers import REPO, hp


def parse_ok(mini_records, tmp_path, *flags, monkeypatch=None):
    return cifar10_main.parse(
        ["--data-dir", mini_records, "--job-dir", str(tmp_path / "job"), "--num-gpus", "0"] + list(flags)
    )


def parse_error(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cifar10_main.parse(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_defaults_are_the_originals(mini_records, tmp_path):
    hp = parse_ok(mini_records, tmp_path)
    cluster = hp.cluster
    assert (hp.num_layers, hp.train_steps, hp.train_batch_size, hp.eval_batch_size) == (44, 80000, 128, 100)
    assert (hp.momentum, hp.weight_decay, hp.learning_rate) == (0.9, 2e-4, 0.1)
    assert (hp.batch_norm_decay, hp.batch_norm_epsilon) == (0.997, 1e-5)
    assert hp.variable_strategy == "CPU" and hp.use_distortion_for_training is True
    assert hp.data_format == "channels_last"  # CPU default
    assert hp.num_train_examples == 4068 and hp.num_workers == 1 and not cluster.distributed


@pytest.mark.parametrize(
    "flags,value",
    [
        ([], True),
        (["--use-distortion-for-training"], True),
        (["--use-distortion-for-training", "False"], False),  # the original's type=bool made this True
        (["--use-distortion-for-training=false"], False),
        (["--no-use-distortion-for-training"], False),
        (["--use-distortion-for-training", "yes"], True),
    ],
)
def test_distortion_flag_is_a_real_boolean(mini_records, tmp_path, flags, value):
    assert parse_ok(mini_records, tmp_path, *flags).use_distortion_for_training is value


def test_flags_file(mini_records, tmp_path):
    flagfile = tmp_path / "flags.txt"
    flagfile.write_text(
        "# a tuning baseline\n--num-layers 20 --learning-rate 0.05\n--data-dir %s\n--num-gpus=0\n" % mini_records
    )
    hp = cifar10_main.parse(["@%s" % flagfile, "--job-dir", str(tmp_path / "j"), "--num-layers", "32"])
    assert (hp.num_layers, hp.learning_rate) == (32, 0.05)  # later flags win


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--num-layers", "45"], "num_layers=45 is not 6n\\+2"),
        (["--num-cpu-towers", "3"], "--train-batch-size 128 is not divisible by the 3 towers: use a multiple of 3"),
        (["--num-cpu-towers", "2", "--eval-batch-size", "99"], "--eval-batch-size 99 is not divisible"),
        (["--num-gpus", "2"], "--num-gpus 2 but 0 GPU\\(s\\) are visible: pass --num-gpus 0"),
        (["--learning-rate", "0"], "--learning-rate 0.0 must be positive"),
        (["--momentum", "1.5"], "--momentum 1.5 must be in"),
        (["--batch-norm-decay", "1"], "--batch-norm-decay 1.0 must be in"),
        (["--deterministic"], "--deterministic needs --seed"),
        (["--sync"], "drop --sync"),
        (["--use-distortion-for-training", "maybe"], "'maybe' is not a boolean"),
        (["--data-format", "NCHW"], "invalid choice: 'NCHW'"),
        (["--optimizer", "auto"], "--optimizer auto chooses by the epochs a --time-budget affords: give a budget"),
        (
            ["--network", "airbench", "--group-widths", "32", "192"],
            "--group-widths 32 192: give the filters of airbench's 3 groups, each at",
        ),
        (["--network", "airbench", "--group-widths", "32", "0", "8"], "--group-widths 32 0 8: give the filters"),
        (["--group-widths", "32", "192", "192"], "--group-widths shapes --network airbench's groups: drop it"),
        (
            ["--network", "airbench", "--group-widths", "32", "192", "192", "--width-multiplier", "0.5"],
            "--group-widths and --width-multiplier 0.5 both set the widths: keep one",
        ),
    ],
)
def test_bad_flags_name_the_value_and_the_fix(mini_records, tmp_path, capsys, flags, message):
    import re

    err = parse_error(capsys, ["--data-dir", mini_records, "--job-dir", str(tmp_path), "--num-gpus", "0"] + flags)
    assert re.search(message, err), err


def test_gpu_flags_are_checked_against_visible_gpus(mini_records, tmp_path, capsys):
    # The default --num-gpus 1 (the original's) fails clearly on a machine without GPUs.
    err = parse_error(capsys, ["--data-dir", mini_records, "--job-dir", str(tmp_path)])
    assert "--num-gpus 1 but 0 GPU(s) are visible: pass --num-gpus 0" in err


# The command as `python -m` runs it, reporting whether TensorFlow was loaded when it exited.
_RUN_MAIN = (
    "import runpy, sys\n"
    "sys.argv = ['cifar10_main'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('estimator.cifar10_main', run_name='__main__')\n"
    "except SystemExit as e:\n    print('exit', e.code, 'tensorflow' in sys.modules)\n"
)


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--num-layers", "45"], "num_layers=45 is not 6n\\+2"),
        (["--time-budget", "5m", "--train-steps", "10"], "drop --train-steps"),
        (["--recipe", "cpu_5min", "--network", "auto", "--num-layers", "20"], "--num-layers 20 shape a ResNet"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_the_command_refuses_a_bad_flag_before_tensorflow_loads(tmp_path, flags, message):
    import subprocess
    import sys

    argv = ["--data-dir", str(tmp_path), "--job-dir", str(tmp_path / "job"), "--num-gpus", "0"] + flags
    proc = subprocess.run([sys.executable, "-c", _RUN_MAIN] + argv, cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "exit 2 False", proc.stdout + proc.stderr
    assert re.search(message, proc.stderr) and len(proc.stderr.splitlines()) == 2, proc.stderr
    assert not os.path.exists(str(tmp_path / "job"))


def test_the_gpus_visible_are_checked_after_tensorflow_loads(tmp_path):
    import subprocess
    import sys

    # The one flag rule only TensorFlow can decide: the original's default --num-gpus 1 on this CPU machine.
    argv = ["--data-dir", str(tmp_path), "--job-dir", str(tmp_path / "job")]
    proc = subprocess.run([sys.executable, "-c", _RUN_MAIN] + argv, cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "exit 2 True", proc.stdout + proc.stderr
    assert "--num-gpus 1 but 0 GPU(s) are visible: pass --num-gpus 0" in proc.stderr, proc.stderr


def test_missing_data_says_run_the_converter(tmp_path, capsys):
    err = parse_error(capsys, ["--data-dir", str(tmp_path / "none"), "--job-dir", str(tmp_path), "--num-gpus", "0"])
    assert "Run generate_cifar10_tfrecords.py --data-dir=%s first" % (tmp_path / "none") in err


def test_job_dir_from_vertex_ai_environment(mini_records, tmp_path, monkeypatch, capsys):
    argv = ["--data-dir", mini_records, "--num-gpus", "0"]
    monkeypatch.delenv("AIP_MODEL_DIR", raising=False)
    monkeypatch.delenv("AIP_CHECKPOINT_DIR", raising=False)
    assert "--job-dir is required" in parse_error(capsys, argv)
    monkeypatch.setenv("AIP_MODEL_DIR", "gs://b/model/")
    assert cifar10_main.parse(argv).job_dir == "gs://b/model"
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "gs://b/checkpoints")
    assert cifar10_main.parse(argv).job_dir == "gs://b/checkpoints"


def test_tuning_trial_gets_its_own_job_dir(mini_records, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps({"cluster": {"master": ["127.0.0.1:1"]}, "task": {"type": "master", "index": 0, "trial": "7"}}),
    )
    hp = parse_ok(mini_records, tmp_path)
    assert hp.cluster.trial == "7" and hp.job_dir == str(tmp_path / "job" / "7")
    assert "CLOUD_ML_TRIAL_ID" not in os.environ  # parsing changes nothing around it
    # Vertex AI tuning trials: AIP_CHECKPOINT_DIR is BASE/<trial>/checkpoints already.
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "gs://b/hp/7/checkpoints")
    hp = cifar10_main.parse(["--data-dir", mini_records, "--num-gpus", "0"])
    assert hp.job_dir == "gs://b/hp/7/checkpoints"
    monkeypatch.delenv("AIP_CHECKPOINT_DIR")
    monkeypatch.delenv("TF_CONFIG")
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "3")
    assert parse_ok(mini_records, tmp_path).job_dir == str(tmp_path / "job" / "3")


CLUSTER = {"master": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "ps": ["127.0.0.1:4"]}


@pytest.mark.parametrize(
    "task,chief,workers",
    [
        ({"type": "master", "index": 0}, True, 3),
        ({"type": "worker", "index": 1}, False, 3),
        ({"type": "ps", "index": 0}, False, 3),
        ({"type": "evaluator", "index": 0}, False, 3),
    ],
)
def test_tf_config_roles(task, chief, workers):
    spec = dict(CLUSTER)
    if task["type"] == "evaluator":  # only beside a chief (Vertex AI): a master evaluates itself
        spec["chief"] = spec.pop("master")
    c = cluster_lib.parse(json.dumps({"cluster": spec, "task": task, "environment": "cloud"}))
    assert (c.is_chief, c.num_workers, c.distributed, c.task_type) == (chief, workers, True, task["type"])


def test_worker_zero_is_chief_without_master():
    c = cluster_lib.parse(json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}))
    assert c.is_chief and c.num_workers == 2


@pytest.mark.parametrize(
    "text,message",
    [
        ("{not json", "TF_CONFIG is not valid JSON"),
        (json.dumps({"cluster": {"boss": ["a:1"]}, "task": {"type": "boss", "index": 0}}), "unknown role 'boss'"),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}),
            "task worker index 2 is out of range: the cluster has 2.",
        ),
        (json.dumps({"cluster": CLUSTER, "task": {"type": "manager", "index": 0}}), "task type 'manager'"),
        (json.dumps({"cluster": {"master": ["nohostport"]}, "task": {"type": "master"}}), "host:port"),
        (json.dumps({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}), "no master, chief or worker"),
        (json.dumps([1, 2]), "must be a JSON object"),
        (json.dumps({"task": {"type": "master", "index": 0}}), "has no cluster to belong to"),
        (json.dumps({"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}}), "evaluator beside a master"),
    ],
)
def test_malformed_tf_config(text, message):
    with pytest.raises(cluster_lib.ClusterConfigError, match=message):
        cluster_lib.parse(text)


def test_malformed_tf_config_is_a_clean_cli_error(mini_records, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", "{bad")
    err = parse_error(capsys, ["--data-dir", mini_records, "--job-dir", str(tmp_path), "--num-gpus", "0"])
    assert "TF_CONFIG is not valid JSON" in err and "Traceback" not in err


def test_resolve_reads_the_environment_it_is_given_and_records_it(mini_records, tmp_path):
    args = flags.build_parser().parse_args(
        ["--data-dir", mini_records, "--num-gpus", "0", "--job-dir", str(tmp_path / "job")]
    )
    environ = {"CLOUD_ML_TRIAL_ID": "5", "AIP_TENSORBOARD_LOG_DIR": "gs://b/tensorboard"}
    hp = config.resolve(args, environ, gpus_visible=0)
    assert (hp.cluster.trial, hp.job_dir, hp.tensorboard_dir) == (
        "5",
        str(tmp_path / "job" / "5"),
        "gs://b/tensorboard",
    )
    # hparams.json holds all of it: what it records reads back to the same HParams.
    record = json.loads(json.dumps(config.describe(hp)))
    assert hparams_lib.HParams.from_dict(record["hparams"]) == hp
    assert record["derived"]["validation_flip_tta"] is False and record["hparams"]["cluster"]["trial"] == "5"
    # Vertex AI's TensorBoard dir is the job dir itself: nothing to mirror.
    same = config.resolve(args, {"AIP_TENSORBOARD_LOG_DIR": str(tmp_path / "job") + "/"}, gpus_visible=0)
    assert (same.tensorboard_dir, same.job_dir, same.cluster.trial) == (None, str(tmp_path / "job"), None)
    assert "CLOUD_ML_TRIAL_ID" not in os.environ


def _copy_records(mini_records, tmp_path):
    import shutil

    data = str(tmp_path / "data")
    shutil.copytree(mini_records, data)
    return data


def test_truncated_records_are_refused_before_training(mini_records, tmp_path, capsys):
    # An interrupted copy: training would run to the end and then fail in the evaluation.
    data = _copy_records(mini_records, tmp_path)
    path = os.path.join(data, "validation.tfrecords")
    full = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(96906)
    err = parse_error(capsys, ["--data-dir", data, "--job-dir", str(tmp_path / "job"), "--num-gpus", "0"])
    assert "%s holds 96,906 bytes but cifar10_manifest.json says %s" % (path, format(full, ",")) in err
    assert "generate_cifar10_tfrecords.py --data-dir=%s --overwrite" % data in err
    assert not os.path.exists(str(tmp_path / "job"))


def test_records_of_another_count_are_refused(mini_records, tmp_path, capsys):
    import tensorflow as tf

    data = _copy_records(mini_records, tmp_path)
    path = os.path.join(data, "eval.tfrecords")
    records = list(tf.compat.v1.io.tf_record_iterator(path))
    with tf.io.TFRecordWriter(path) as writer:
        for record in records[:-2]:
            writer.write(record)
    # A manifest that agrees on the size: only the count can tell.
    manifest_path = os.path.join(data, "cifar10_manifest.json")
    manifest = json.load(open(manifest_path))
    manifest["files"]["eval.tfrecords"]["bytes"] = os.path.getsize(path)
    json.dump(manifest, open(manifest_path, "w"))
    err = parse_error(capsys, ["--data-dir", data, "--job-dir", str(tmp_path / "job"), "--num-gpus", "0"])
    assert "%s holds 1,015 records but cifar10_manifest.json says 1,017" % path in err


RECIPES = sorted(
    os.path.join("recipes", name)
    for name in os.listdir(os.path.join(os.path.dirname(os.path.dirname(__file__)), "recipes"))
    if name.endswith(".args")
)


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_parses_and_validates(recipe):
    # GPU recipes are validated as if their GPUs were there; --precision auto is not probed here.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = flags.build_parser().parse_args(["@" + os.path.join(repo, recipe), "--data-dir", "d", "--job-dir", "j"])
    flags.validate(args, cluster_lib.Cluster(), gpus_visible=args.num_gpus)
    assert len(RECIPES) == 4 and args.time_budget in (None, 300.0, 1800.0)


GROUPS = [
    "job, data and logs",
    "network",
    "optimisation and schedule",
    "time budget and precision",
    "augmentation",
    "evaluation, checkpoints and export",
    "health rules",
    "cluster and devices",
]


def _flag_actions(parser):
    return [a for a in parser._actions if a.option_strings and a.help is not argparse.SUPPRESS and a.dest != "help"]


def test_help_groups_every_flag_by_concern_and_states_each_default_once():
    parser = flags.build_parser()
    # argparse's own groups (-h; their titles differ between Python 3.9 and 3.10) aside.
    ours = [g for g in parser._action_groups if g not in (parser._optionals, parser._positionals)]
    groups = [g for g in ours if any(a.help is not argparse.SUPPRESS for a in g._group_actions)]
    assert [g.title for g in groups] == GROUPS
    # The CPU towers are taken as before, out of --help and the docs' table; the rules' thresholds are retired.
    hidden = [a.option_strings[0] for a in parser._actions if a.help is argparse.SUPPRESS and a.dest != "help"]
    assert "--num-cpu-towers" in hidden and len([h for h in hidden if h.startswith("--health-")]) == 14
    assert parser.parse_args(["--data-dir", "d", "--job-dir", "j", "--num-cpu-towers", "2"]).num_cpu_towers == 2
    assert "--health-class-ratio" not in parser.format_help() and "--health-checks" in parser.format_help()
    assert {a.dest for g in groups for a in g._group_actions} == {a.dest for a in _flag_actions(parser)}
    formatter = parser._get_formatter()
    for action in _flag_actions(parser):
        text = formatter._get_help_string(action)
        assert action.help and action.help.strip(), action.option_strings
        if action.required:
            assert "Required" in text and "default" not in text, action.option_strings
        elif action.dest == "job_dir":  # required unless Vertex AI names the directory
            assert "Required, except on Vertex AI: $AIP_CHECKPOINT_DIR" in text
        else:
            assert len(re.findall(r"\bdefault\b", text)) == 1, (action.option_strings, text)
            assert "(default: None)" not in text, action.option_strings
    rendered = parser.format_help()
    assert "--recipe cpu_5min" in rendered and "@FILE" in rendered and "airbench" in rendered
    assert len(rendered.splitlines()) < 300


def test_every_boolean_flag_takes_the_same_three_spellings(mini_records, tmp_path):
    parser = flags.build_parser()
    booleans = [a for a in _flag_actions(parser) if isinstance(a, flags._BoolFlag)]
    names = {a.dest for a in booleans}
    assert {"sync", "verbose", "deterministic", "log_device_placement", "nesterov", "export"} <= names
    base = ["--data-dir", "d", "--job-dir", "j"]
    for action in booleans:
        flag = action.option_strings[0]
        assert getattr(parser.parse_args(base + [flag]), action.dest) is True, flag
        assert getattr(parser.parse_args(base + [flag + "=false"]), action.dest) is False, flag
        assert getattr(parser.parse_args(base + ["--no-" + flag[2:]]), action.dest) is False, flag
        assert getattr(parser.parse_args(base), action.dest) is action.default, flag


def test_retired_options_are_not_in_the_help_and_leave_no_field():
    rendered = flags.build_parser().format_help()
    fields = set(hparams_lib.HParams.__dataclass_fields__)
    for name in hparams_lib.RETIRED:
        assert hparams_lib.flag_name(name) not in rendered and name not in fields


def test_choices_are_enums_equal_to_their_spellings(mini_records, tmp_path):
    from estimator.common.options import EvalPolicy, HealthAction, LrSchedule, Network, Precision

    hp = parse_ok(mini_records, tmp_path, "--network", "airbench", "--lr-schedule", "onecycle", "--time-budget", "1m")
    assert hp.network is Network.AIRBENCH and hp.lr_schedule is LrSchedule.ONECYCLE
    assert hp.precision is Precision.FP32 and hp.health_checks is HealthAction.WARN
    assert hp.eval_policy is EvalPolicy.PERIODIC and hp.eval_policy == "periodic" and "%s" % hp.network == "airbench"
    # hparams.json keeps the spellings, and reads back as the same enums.
    recorded = json.loads(json.dumps(hp.to_dict()))
    assert recorded["network"] == "airbench" and recorded["lr_schedule"] == "onecycle"
    assert hparams_lib.HParams.from_dict(recorded) == hp
    with pytest.raises(ValueError, match="'sgd' is not a valid LrSchedule"):
        hparams_lib.HParams(data_dir="", job_dir="", lr_schedule="sgd")
    # The parser's choices are the enums' values.
    parser = flags.build_parser()
    choices = {a.dest: tuple(a.choices) for a in parser._actions if a.choices}
    assert choices["precision"] == Precision.values() and choices["network"] == Network.values()
    assert choices["eval_policy"] == EvalPolicy.values() and choices["health_checks"] == HealthAction.values()
    assert choices["lr_schedule"] == LrSchedule.values()


def test_bf16_is_refused_where_onednn_is_held_below_it(mini_records, tmp_path):
    """ONEDNN_MAX_CPU_ISA=AVX2 makes oneDNN do what an AVX2-only CPU does; TensorFlow 2.15, deciding from
    the CPU's flags, would then abort on its first bf16 matrix product: one line instead, nothing written."""
    args = flags.build_parser().parse_args(
        ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0", "--precision", "bf16"]
    )
    with pytest.raises(ValueError) as e:
        config.resolve(args, environ={"ONEDNN_MAX_CPU_ISA": "avx2"}, gpus_visible=0)
    assert str(e.value) == (
        "--precision bf16: ONEDNN_MAX_CPU_ISA=AVX2 holds oneDNN below bf16, where TensorFlow aborts: use fp32 or auto."
    )
    assert not os.path.exists(str(tmp_path / "j"))
    assert config.resolve(args, environ={"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, gpus_visible=0).precision == "bf16"
    # auto: fp32 there, and nothing timed; the budget's to choose, which the core's resolve cannot.
    args.precision = "auto"
    with pytest.raises(ValueError, match="--precision auto are resolved by estimator.budget.job.resolve"):
        config.resolve(args, environ={"ONEDNN_MAX_CPU_ISA": "AVX2"}, gpus_visible=0)
    hp = budget_job.resolve(args, environ={"ONEDNN_MAX_CPU_ISA": "AVX2"}, gpus_visible=0)
    assert (hp.precision, hp.precision_probe) == ("fp32", {})


def test_a_recipe_by_name_or_file_stands_for_its_flags_and_later_flags_win(mini_records, tmp_path, capsys):
    from estimator.training import recipes

    assert recipes.names() == ["cpu_30min", "cpu_5min", "he2016_resnet56", "tutorial_defaults"]
    base = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j")]
    args = flags.build_parser().parse_args(["--recipe", "he2016_resnet56", *base, "--num-gpus", "0"])
    assert (args.recipe, args.num_layers, args.lr_decay_steps, args.num_gpus) == (
        "he2016_resnet56",
        56,
        [32000, 48000],
        0,
    )
    # The same file by path, and --recipe=NAME; a flag given after the recipe wins.
    path = os.path.join(recipes.DIRECTORY, "he2016_resnet56.args")
    args = flags.build_parser().parse_args(["--recipe=" + path, *base, "--num-layers", "20"])
    assert (args.recipe, args.num_layers, args.weight_decay) == (path, 20, 1e-4)
    # The trainer records it.
    hp = parse_ok(mini_records, tmp_path, "--recipe", "tutorial_defaults", "--train-steps", "5", "--num-gpus", "0")
    assert hp.recipe == "tutorial_defaults" and hp.num_layers == 44
    for argv, message in [
        (["--recipe", "cpu_1min"], "--recipe cpu_1min is neither a recipe of this package (cpu_30min, cpu_5min, "),
        (["--recipe", "cpu_5min", "--recipe", "cpu_30min"], "--recipe is given 2 times: give one recipe"),
        (["--recipe"], "--recipe needs a name (cpu_30min, cpu_5min, he2016_resnet56, tutorial_defaults) or a path."),
    ]:
        err = parse_error(capsys, argv + base)
        assert message in err and len(err.strip().splitlines()) == 2, err


def test_a_recipe_inside_a_flag_file_is_expanded_too(mini_records, tmp_path):
    flagfile = tmp_path / "best.args"
    flagfile.write_text("# a study's best.args\n--recipe he2016_resnet56 --num-gpus 0\n--weight-decay=3e-4\n")
    args = flags.build_parser().parse_args(["@" + str(flagfile), "--data-dir", mini_records, "--job-dir", "j"])
    assert (args.recipe, args.num_layers, args.num_gpus, args.weight_decay) == ("he2016_resnet56", 56, 0, 3e-4)


def test_a_job_dir_of_0_3_0_is_read_and_restarted_with_the_graph_it_trained(mini_records, tmp_path):
    """tests/data/hparams_0.3.0.json: what version 0.3.0 wrote for the 5-minute recipe (airbench94 x0.5 named,
    fp32, batch 64), without the keys later versions add (filter_gradients, speed_probe, eval_examples)."""
    import shutil

    import tensorflow as tf

    from estimator import resilience
    from estimator.networks import registry

    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(os.path.join(os.path.dirname(__file__), "data", "hparams_0.3.0.json"), str(job / "hparams.json"))
    recorded = json.load(open(str(job / "hparams.json")))
    assert recorded["package_version"] == "0.3.0" and "speed_probe" not in recorded["hparams"]
    hp = config.load(str(job))
    assert (hp.network, hp.width_multiplier, hp.precision, hp.train_batch_size) == ("airbench", 0.5, "fp32", 64)
    assert hp.filter_gradients is None and hp.speed_probe is None
    # Every key it recorded reads back as it was but the two options 0.4.0 retired (off there) and the health
    # thresholds 0.5.0 retired (their defaults there); the new ones are added, none renamed.
    again = json.loads(json.dumps(config.describe(hp)["hparams"]))  # as hparams.json holds it
    kept = {k: v for k, v in recorded["hparams"].items() if k not in hparams_lib.RETIRED}
    assert again["cluster"].pop("evaluator") is False  # added in 0.6.0: no evaluator beside it
    assert {k: again[k] for k in kept} == kept
    thresholds = {k for k, retired in hparams_lib.RETIRED.items() if retired.version == "0.5.0"}
    assert len(thresholds) == 14 and all(k.startswith("health_") for k in thresholds)
    assert set(recorded["hparams"]) - set(again) == {"ema_decay", "zero_init_residual"} | thresholds
    assert (recorded["hparams"]["ema_decay"], recorded["hparams"]["zero_init_residual"]) == (0.0, False)
    added = {"filter_gradients", "speed_probe", "save_summary_steps", "eval_examples", "optimizer"}
    added |= {"muon_learning_rate", "muon_momentum", "tta_fraction", "optimizer_choice", "group_widths"}
    assert set(again) - set(recorded["hparams"]) == added
    # Its training graph builds from hparams.json alone, and the same flags restart it.
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope("resnet"):
            logits = registry.build(hp, True).forward_pass(tf.zeros([2, 32, 32, 3]))
        assert logits.shape.as_list() == [2, 10]
    argv = [
        "--recipe",
        "cpu_5min",
        "--data-dir",
        mini_records,
        "--job-dir",
        str(job),
        "--network",
        "airbench",
        "--width-multiplier",
        "0.5",
    ]
    argv += ["--precision", "fp32", "--train-batch-size", "64", "--time-budget", "90s"]
    restarted, _ = budget_job.parse(argv, environ={})
    resilience.check_same_network(restarted)
    other, _ = budget_job.parse(argv + ["--width-multiplier", "0.25"], environ={})
    with pytest.raises(resilience.ForeignJobDirError, match="--width-multiplier is 0.25 here, 0.5 in its hparams.json"):
        resilience.check_same_network(other)


@pytest.mark.parametrize(
    "declared,words,inside,outside",
    [
        (settings.POSITIVE, "positive", [1e-9, 3], [0, -1]),
        (settings.NONNEGATIVE, "0 or more", [0, 7], [-1e-9]),
        (settings.Range(0, 1, low_open=True, high_open=True), "in (0, 1)", [0.5], [0, 1]),
        (settings.Range(0, 1, high_open=True), "in [0, 1)", [0, 0.99], [1, -0.1]),
        (settings.Range(0, 1, low_open=True), "in (0, 1]", [1], [0, 1.01]),
        (settings.Range(0, 16, unit="pixels"), "from 0 to 16 pixels", [0, 16], [-1, 17]),
        (settings.Range(0, 32, unit="pixels", what="a square side"), "a square side from 0 to 32 pixels", [8], [33]),
        (settings.Range(0, low_open=True, step=1 / 8), "positive with 8 x it a whole number", [0.125, 1.5], [0.3, 0]),
    ],
)
def test_a_declared_range_says_its_values_and_holds_to_them(declared, words, inside, outside):
    assert declared.describe() == words
    assert all(declared.contains(v) for v in inside) and not any(declared.contains(v) for v in outside)
    with pytest.raises(ValueError, match="^--x %s must be %s\\.$" % (re.escape(str(outside[0])), re.escape(words))):
        declared.check("--x", outside[0])


def _outside(declared):
    """A value just outside a range: below its low bound, else above its high one."""
    if declared.low is not None:
        return declared.low if declared.low_open else declared.low - 1
    return declared.high + 1


RANGED = [(f.name, d.range) for f, d, _ in settings.declared(hparams_lib.HParams) if d.range is not None]


@pytest.mark.parametrize("name,declared", RANGED, ids=[name for name, _ in RANGED])
def test_every_declared_range_is_checked_before_any_rule_naming_the_flag(mini_records, name, declared):
    """One declaration per setting: its range, as declared, is what the trainer refuses, with no code of its own."""
    flag, value = settings.flag_name(name), _outside(declared)
    args = flags.build_parser().parse_args(["--data-dir", mini_records, "--job-dir", "j", flag, str(value)])
    with pytest.raises(ValueError) as e:
        flags.validate(args, cluster_lib.Cluster(), gpus_visible=0)
    assert str(e.value).startswith("%s %s must be %s" % (flag, args.__dict__[name], declared.describe()))


def test_every_flag_is_one_declared_field_in_a_known_group():
    declared = settings.declared(hparams_lib.HParams)
    assert {settings.flag_name(f.name) for f, _, _ in declared} | {
        settings.flag_name(name) for name in hparams_lib.RETIRED
    } == {a.option_strings[0] for a in flags.build_parser()._actions if a.dest != "help"}
    assert [g.key for g in settings.GROUPS] == list(dict.fromkeys(d.group for _, d, _ in declared))
    assert len(declared) == 64 and len(RANGED) == 27
    with pytest.raises(ValueError, match="setting group 'nowhere' is not one of job, network"):
        settings.setting(1, "nowhere", "A setting without a group.")


def test_a_setting_added_by_one_declaration_reaches_its_user(mini_records, tmp_path, capsys):
    """--save-summary-steps (0.4.0) is one field in hparams.py and one use in train.run_config: its flag, help,
    check, docs row and hparams.json key come from the declaration."""
    from estimator import train

    hp = parse_ok(mini_records, tmp_path, "--save-summary-steps", "7")
    assert hp.save_summary_steps == 7 and train.run_config(hp).save_summary_steps == 7
    default = parse_ok(mini_records, tmp_path, "--log-every-n-steps", "40")
    assert default.save_summary_steps is None and train.run_config(default).save_summary_steps == 40
    assert "save_summary_steps" in config.describe(hp)["hparams"]
    assert "(positive; default: 100, or --log-every-n-steps if fewer)" in " ".join(
        flags.build_parser().format_help().split()
    )
    err = parse_error(capsys, ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--save-summary-steps=0"])
    assert "--save-summary-steps 0 must be positive." in err and not os.path.exists(str(tmp_path / "j"))


def test_the_settings_that_shape_the_network_are_declared_once_and_every_list_follows_them():
    """``shapes=True`` on a declaration is the one list of what shapes the network's variables: the job dir's
    refusal of another network and the probes' cache key follow it, and every field the networks read is either
    one of them or named here as one that leaves the variables' shapes alone."""
    from estimator.budget import family, probes
    from estimator.common import options
    from estimator.resilience import jobdir

    shape = options.network_shape(hparams_lib.HParams)
    assert shape == ("network", "num_layers", "resnet_version", "group_depth", "width_multiplier", "group_widths")
    assert jobdir.NETWORK_FLAGS == shape and set(family.SHAPE) <= set(shape)
    read = set()
    for name in ("registry", "layers", "resnet", "airbench"):
        source = open(os.path.join(REPO, "estimator", "networks", name + ".py")).read()
        read |= set(re.findall(r"\bhp\.([a-z_]+)\b", source)) - {"replace"}
    leaves_shapes = {"batch_norm_decay", "batch_norm_epsilon", "data_format", "filter_gradients", "precision"}
    assert read - set(shape) == leaves_shapes, read - set(shape) ^ leaves_shapes
    # A shape setting that changes changes the probes' cache key.
    cpu = {"model": "m", "family": 6, "model_number": 1, "flags": set(), "isa": "ALL", "cores": 2}
    base = hp(network="airbench", width_multiplier=0.5)
    keys = {
        probes.cache_key(cpu, base.replace(**{name: value}))
        for name, value in [("group_depth", 3), ("width_multiplier", 0.75), ("group_widths", (32, 192, 192))]
    }
    assert len(keys | {probes.cache_key(cpu, base)}) == 4
