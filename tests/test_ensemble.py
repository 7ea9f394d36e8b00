"""--ensemble N: N networks side by side, each from its own loss, evaluated and exported by their mean logits."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from estimator.networks import ensemble, registry
from estimator.training.model_fn import tower_fn
from tests.helpers import SMALL_AIRBENCH, hp, predict_records, run_job

v1 = tf.compat.v1

AIRBENCH = dict(network="airbench", width_multiplier=0.25)


def _values(sess, prefix=""):
    return {v.op.name[len(prefix) :]: sess.run(v) for v in v1.global_variables() if v.op.name.startswith(prefix)}


def _single_network(params, values, images, labels, weight_decay, smoothing):
    """One network (no ensemble) with ``values`` loaded: its logits and its loss's gradients by variable name."""
    with tf.Graph().as_default(), v1.Session() as sess:
        with v1.variable_scope("resnet"):
            model = registry.build(params, True)
            out = tower_fn(model, tf.constant(images), tf.constant(labels), weight_decay, label_smoothing=smoothing)
        sess.run(v1.global_variables_initializer())
        for var in v1.global_variables():
            var.load(values[var.op.name], sess)
        logits, grads = sess.run([out.logits, [g for g, _ in out.grads_and_vars]])
        return logits, {v.op.name: g for g, (_, v) in zip(grads, out.grads_and_vars)}


@pytest.mark.parametrize("network", [AIRBENCH, dict(network="resnet", num_layers=8)])
def test_each_member_is_the_single_network_and_learns_from_its_own_loss(network):
    # Batch-norm statistics of a training pass: every member sees the same batch, as it would alone.
    images = np.random.RandomState(0).uniform(0, 255, (6, 32, 32, 3)).astype(np.float32)
    labels = np.array([3, 1, 4, 1, 5, 9], np.int32)
    with tf.Graph().as_default(), v1.Session() as sess:
        v1.set_random_seed(1)
        with v1.variable_scope("resnet"):
            model = registry.build(hp(ensemble=2, **network), True)
            assert isinstance(model, ensemble.Ensemble) and len(model.members) == 2
            out = tower_fn(model, tf.constant(images), tf.constant(labels), 2e-3, label_smoothing=0.2)
        sess.run(v1.global_variables_initializer())
        logits, members, grads = sess.run([out.logits, model.member_logits, [g for g, _ in out.grads_and_vars]])
        grads = {v.op.name: g for g, (_, v) in zip(grads, out.grads_and_vars)}
        values = [_values(sess, "resnet/member%d/" % i) for i in (1, 2)]
        names = {v.op.name for v in v1.global_variables()}
    assert names == {"resnet/member%d/%s" % (i, n) for i in (1, 2) for n in values[0]}  # two of each, nothing else
    assert set(values[0]) == set(values[1]) and len(values[0]) > 5
    # Each member starts from its own random draw, so they differ (the whitening kernel is the same: fixed).
    assert any(not np.array_equal(values[0][n], values[1][n]) for n in values[0])
    np.testing.assert_allclose(logits, (members[0] + members[1]) / 2, rtol=1e-6, atol=1e-6)
    assert np.abs(members[0] - members[1]).max() > 1e-3
    for i in (0, 1):
        # Each member computes what the network alone computes with its values, and its gradients are those
        # of its own loss (label smoothing, weight decay), not of the averaged logits' nor half of them.
        single_values = {"resnet/" + n: v for n, v in values[i].items()}
        alone, alone_grads = _single_network(hp(**network), single_values, images, labels, 2e-3, 0.2)
        np.testing.assert_allclose(members[i], alone, rtol=1e-4, atol=1e-5)
        for name, grad in alone_grads.items():
            np.testing.assert_allclose(
                grads[name.replace("resnet/", "resnet/member%d/" % (i + 1), 1)], grad, rtol=1e-3, atol=1e-6
            )


def test_ensemble_flag_is_recorded_described_and_refused_below_one(mini_records, tmp_path, capsys):
    from estimator import cifar10_main

    argv = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0"]
    assert cifar10_main.parse(argv).ensemble == 1
    assert cifar10_main.parse(argv + ["--network", "airbench", "--ensemble", "3"]).ensemble == 3
    assert registry.describe(hp(ensemble=2, **AIRBENCH)) == "ensemble of 2 airbench networks x0.25 wide"
    assert registry.describe(hp(ensemble=3, num_layers=14)) == "ensemble of 3 ResNet-14 v1"
    assert registry.describe(hp(num_layers=14)) == "ResNet-14 v1"
    with tf.Graph().as_default():
        assert not isinstance(registry.build(hp(), False), ensemble.Ensemble)  # 1: the network as before
    for value, message in [
        ("0", "--ensemble 0 must be at least 1 (1: one network; 2 or more: an ensemble)"),
        ("-2", "--ensemble -2 must be at least 1"),
        ("1.5", "argument --ensemble: '1.5' is not a whole number"),
    ]:
        with pytest.raises(SystemExit) as e:
            cifar10_main.parse(argv + ["--ensemble", value])
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert not os.path.exists(str(tmp_path / "j"))
    with pytest.raises(ValueError, match="an ensemble needs at least 2 networks, not 1"):
        ensemble.Ensemble([object()])


@pytest.mark.slow
def test_an_ensemble_job_trains_exports_predicts_and_refuses_a_single_network_restart(mini_records, tmp_path):
    job = str(tmp_path / "job")
    code, out = run_job(mini_records, job, *SMALL_AIRBENCH, *"--ensemble 2 --train-steps 3 --eval-policy final".split())
    assert code == 0, out[-3000:]
    results = json.load(open(os.path.join(job, "results.json")))
    assert results["global_step"] == 3
    assert json.load(open(os.path.join(job, "hparams.json")))["hparams"]["ensemble"] == 2
    assert "ensemble of 2 airbench networks x0.25 wide, fp32" in out
    # The export averages both members: predicting the test records gives the evaluation's accuracy.
    rc, scored, err = predict_records(job, mini_records, tmp_path)
    assert rc == 0, err
    assert round(json.loads(scored)["accuracy"] * 1017) == round(results["accuracy"] * 1017)
    code, out = run_job(mini_records, job, *SMALL_AIRBENCH, "--train-steps", "4")
    assert code == 2 and "--ensemble is 1 here, 2 in its hparams.json" in out, out[-2000:]
    # benchmarks.ensemble_members scores each member alone and their mean: the mean is the job's own figure.
    from benchmarks import ensemble_members

    out_json = str(tmp_path / "members.json")
    ensemble_members.main([job, "--data-dir", mini_records, "--out", out_json])
    scored = json.load(open(out_json))
    assert scored["test_images"] == 1017 and len(scored["member_accuracy"]) == 2 and len(scored["pairs_agreeing"]) == 1
    assert round(scored["ensemble_accuracy"] * 1017) == round(results["accuracy"] * 1017)
    assert all(0 < a < 1 for a in scored["member_accuracy"]) and 0 < scored["pairs_agreeing"][0] <= 1


def test_ensemble_members_refuses_a_single_network_job(tmp_path):
    from benchmarks import ensemble_members
    from estimator.training import config

    config.save(hp(job_dir=str(tmp_path)))
    with pytest.raises(SystemExit, match="trained one network \\(--ensemble 1\\): nothing to compare"):
        ensemble_members.main([str(tmp_path), "--data-dir", "unused", "--out", str(tmp_path / "m.json")])
    assert not os.path.exists(str(tmp_path / "m.json"))
