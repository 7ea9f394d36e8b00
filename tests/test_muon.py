"""--optimizer muon: the Newton-Schulz step, one update against NumPy, towers, checkpoints and a real job."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from estimator.training import muon
from tests.helpers import SMALL_AIRBENCH, events, train_here

v1 = tf.compat.v1


def newton_schulz_numpy(matrix, steps=muon.NEWTON_SCHULZ_STEPS):
    """The reference: airbench94_muon's quintic iteration, in float64."""
    a, b, c = muon.NEWTON_SCHULZ
    tall = matrix.shape[0] > matrix.shape[1]
    x = matrix.T if tall else matrix
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


@pytest.mark.parametrize("shape", [(8, 36), (36, 8), (64, 64), (256, 2304)])
def test_newton_schulz_orthogonalises_with_singular_values_near_one_the_tall_side_transposed(shape):
    # A matrix of known singular vectors and values spread threefold (a gradient's top directions): three steps
    # from X / |X| bring each into [0.5, 1.5] (airbench94_muon: "something like U S' V^T").
    random = np.random.RandomState(0)
    side = min(shape)
    u = np.linalg.qr(random.normal(size=(shape[0], side)))[0]
    v = np.linalg.qr(random.normal(size=(shape[1], side)))[0]
    matrix = (u * np.linspace(1.0, 3.0, side)) @ v.T
    matrix = matrix.astype(np.float32)
    with tf.Graph().as_default(), v1.Session() as sess:
        out = sess.run(muon.newton_schulz(tf.constant(matrix)))
        transposed = sess.run(muon.newton_schulz(tf.constant(matrix.T)))
    assert out.shape == shape
    singular = np.linalg.svd(out, compute_uv=False)
    assert singular.min() > 0.5 and singular.max() < 1.5, (singular.min(), singular.max())
    # The singular vectors are the input's: U S' V^T against U S V^T.
    rotated = u.T @ out @ v
    np.testing.assert_allclose(rotated, np.diag(np.diag(rotated)), atol=2e-3)
    # The tall side is transposed: the wide iteration either way, the same result.
    np.testing.assert_allclose(transposed, out.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out, newton_schulz_numpy(matrix.astype(np.float64)), rtol=1e-3, atol=1e-4)
    # The check can fail: three steps of the iteration are not an identity.
    assert not np.allclose(out, matrix / np.linalg.norm(matrix), atol=1e-2)


@pytest.mark.bf16_kernels
def test_newton_schulz_in_bf16_is_float32s_within_bf16s_rounding():
    """Where the network computes in bf16 the iteration does too (airbench94_muon's), and returns float32."""
    matrix = np.random.RandomState(3).normal(size=(256, 2304)).astype(np.float32)
    with tf.Graph().as_default(), v1.Session() as sess:
        exact, low = sess.run(
            [muon.newton_schulz(tf.constant(matrix)), muon.newton_schulz(tf.constant(matrix), dtype=tf.bfloat16)]
        )
    assert low.dtype == np.float32 and np.abs(low - exact).max() < 0.05 * np.abs(exact).max()
    assert not np.array_equal(low, exact)


def test_one_update_is_numpys_for_the_filters_and_sgd_for_the_rest():
    """A 3x3 filter (4 in, 8 out) and a bias, two steps: Nesterov momentum, the update orthogonalised as an
    out x (k*k*in) matrix, the filter renormalised to norm sqrt(8) then stepped; the bias by MomentumOptimizer."""
    random = np.random.RandomState(1)
    kernel0, bias0 = random.normal(size=(3, 3, 4, 8)), random.normal(size=(8,))
    grads = [(random.normal(size=(3, 3, 4, 8)), random.normal(size=(8,))) for _ in range(2)]
    rate, beta, muon_rate, muon_beta = 0.1, 0.9, 0.24, 0.6
    with tf.Graph().as_default(), v1.Session() as sess:
        kernel = v1.get_variable("kernel", initializer=kernel0.astype(np.float32))
        bias = v1.get_variable("bias", initializer=bias0.astype(np.float32))
        feeds = [v1.placeholder(tf.float32, v.shape) for v in (kernel, bias)]
        step = muon.MuonOptimizer(rate, beta, muon_rate, muon_beta).apply_gradients(zip(feeds, (kernel, bias)))
        sess.run(v1.global_variables_initializer())
        for g_kernel, g_bias in grads:
            sess.run(step, {feeds[0]: g_kernel, feeds[1]: g_bias})
        got_kernel, got_bias = sess.run([kernel, bias])
    # NumPy, in float64.
    w, b, buffer, accumulator = kernel0, bias0, np.zeros_like(kernel0), np.zeros_like(bias0)
    for g_kernel, g_bias in grads:
        buffer = muon_beta * buffer + g_kernel
        update = newton_schulz_numpy((g_kernel + muon_beta * buffer).reshape(-1, 8)).reshape(w.shape)
        w = w * np.sqrt(8) / np.linalg.norm(w) - muon_rate * update
        accumulator = beta * accumulator + g_bias
        b = b - rate * accumulator
    np.testing.assert_allclose(got_kernel, w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_bias, b, rtol=1e-5, atol=1e-6)
    assert abs(np.linalg.norm(got_kernel) - np.sqrt(8)) < 0.5  # renormalised, then one step of 0.24


def _one_step_filters(num_cpu_towers, images, labels):
    """The filters after one Muon step of model_fn's training graph (airbench x0.25, no batch-norm update)."""
    from estimator.training.model_fn import model_fn
    from tests.helpers import hp

    params = hp(
        network="airbench",
        width_multiplier=0.25,
        num_gpus=0,
        num_cpu_towers=num_cpu_towers,
        optimizer="muon",
        train_batch_size=len(images),
        train_steps=10,
        lr_schedule="cosine",
        health_checks="off",
        histograms=False,
    )
    with tf.Graph().as_default():
        v1.set_random_seed(0)
        spec = model_fn(tf.constant(images), tf.constant(labels), tf.estimator.ModeKeys.TRAIN, params)
        filters = [v for v in v1.trainable_variables() if muon.is_filter(v)]
        config = v1.ConfigProto(device_count={"CPU": max(1, num_cpu_towers)})
        with v1.Session(config=config) as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            before = sess.run(filters)
            sess.run(spec.train_op)
            return before, sess.run(filters)


def test_two_towers_of_the_same_images_make_one_towers_update(monkeypatch):
    """The towers' gradients are averaged on the parameter device and Muon steps once: two towers that each see
    the batch one tower sees make the same update (batch norm sees the same images in each)."""
    from estimator.training import model_fn as model_fn_module

    class Images:  # the whitening's images, without records: the same random ones for both graphs
        def __init__(self, *_):
            pass

        def first_images(self, n):
            return tf.random.stateless_uniform([n, 32, 32, 3], seed=[1, 2], maxval=255.0)

    monkeypatch.setattr(model_fn_module, "Cifar10DataSet", Images)
    random = np.random.RandomState(2)
    images = random.uniform(0, 255, (8, 32, 32, 3)).astype(np.float32)
    labels = (np.arange(8) % 10).astype(np.int32)
    before, one = _one_step_filters(1, images, labels)
    before2, two = _one_step_filters(2, np.concatenate([images, images]), np.concatenate([labels, labels]))
    for a, b in zip(before, before2):
        np.testing.assert_array_equal(a, b)  # the same start
    for a, b, start in zip(one, two, before):
        assert not np.allclose(a, start)
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4)


@pytest.mark.slow
def test_a_muon_job_trains_saves_its_buffers_renormalises_and_resumes_them(mini_records, tmp_path, capsys):
    """A real job: the filters' momentum buffers are in the checkpoint, each filter's norm is sqrt(out) less one
    step, the filters' rate decays linearly to 0, and a restart from the checkpoint resumes the buffers."""
    job = str(tmp_path / "job")
    # No exports and one evaluation: neither is what this test checks.
    muon = "--optimizer muon --lr-schedule onecycle --seed 1 --health-checks off --export false --eval-policy final"
    flags = SMALL_AIRBENCH + muon.split()
    code, out = train_here(capsys, mini_records, job, *flags, "--train-steps", "30", "--save-checkpoints-steps", "20")
    assert code == 0, out[-3000:]
    reader = tf.train.load_checkpoint(job)
    names = reader.get_variable_to_shape_map()
    filters = [n for n, shape in names.items() if len(shape) == 4 and n.endswith("/kernel") and "whiten" not in n]
    assert filters and all(n + "/Muon" in names for n in filters)
    for name in filters:
        weight, buffer = reader.get_tensor(name), reader.get_tensor(name + "/Muon")
        assert np.abs(buffer).max() > 0
        # Renormalised to sqrt(out), then one step of at most the rate (an update of norm about sqrt(min side)).
        assert abs(np.linalg.norm(weight) - np.sqrt(weight.shape[-1])) < 0.12 * np.sqrt(weight.shape[-1]) + 1e-6
    rates = [value for _, value in events(job).get("train/muon_learning_rate", [])]
    assert rates and rates[0] == pytest.approx(0.12, rel=0.1) and all(a >= b for a, b in zip(rates, rates[1:]))
    hparams = json.load(open(os.path.join(job, "hparams.json")))["hparams"]
    assert (hparams["optimizer"], hparams["muon_learning_rate"], hparams["muon_momentum"]) == ("muon", 0.12, 0.6)
    # A restart resumes the buffers: the same restart from a copy of the step-30 checkpoint whose buffers are
    # zeroed differs by exactly the momentum times the saved buffer (the same weights, batch and gradient).
    saved = {n: reader.get_tensor(n + "/Muon") for n in filters}
    zeroed = str(tmp_path / "zeroed")
    shutil.copytree(job, zeroed)
    with tf.Graph().as_default(), v1.Session() as sess:
        values = {n: reader.get_tensor(n) for n in names}
        variables = {n: v1.Variable(np.zeros_like(v) if n.endswith("/Muon") else v, name=n) for n, v in values.items()}
        sess.run(v1.global_variables_initializer())
        v1.train.Saver(variables).save(sess, os.path.join(zeroed, "model.ckpt"), global_step=30)
    # Each restart trains step 31 in this process: the job's model_fn, Estimator and input, no evaluations after.
    from estimator import cifar10_main, train
    from estimator.data import records as fmt

    for directory in (job, zeroed):
        hp = cifar10_main.parse(["--data-dir", mini_records, "--job-dir", directory, *flags, "--train-steps", "31"])
        estimator = tf.estimator.Estimator(train.model_fn_with(()), config=train.run_config(hp), params=hp)
        estimator.train(train.input_fn(hp, fmt.TRAIN, seed=hp.seed), max_steps=31)
    resumed, fresh = tf.train.load_checkpoint(job), tf.train.load_checkpoint(zeroed)
    assert resumed.get_tensor("global_step") == fresh.get_tensor("global_step") == 31
    for name, before in saved.items():
        difference = resumed.get_tensor(name + "/Muon") - fresh.get_tensor(name + "/Muon")
        np.testing.assert_allclose(difference, 0.6 * before, rtol=1e-3, atol=1e-5)


def test_optimizer_auto_takes_muon_below_its_epochs_and_a_restart_keeps_the_first_runs():
    """--optimizer auto: the epochs the budget affords at the measured speed, as the plan counts its training time
    (planner.training_secs); Muon below hparams.MUON_BELOW_EPOCHS, SGD from there or with no speed measured."""
    from estimator.budget import choice, planner
    from estimator.data import records as fmt
    from estimator.training.hparams import MUON_BELOW_EPOCHS, MUON_SHORT_BELOW_EPOCHS, MUON_SHORT_RATE
    from tests.helpers import hp as small_hp

    base = small_hp(optimizer="auto", time_budget=300.0, num_train_examples=50000, train_batch_size=512)
    base = base.replace(eval_examples={fmt.TEST: 10000, fmt.VALIDATION: 0}, train_subsets=(fmt.TRAIN, fmt.VALIDATION))

    def at(rate):
        speed = {"train": rate, "eval": 3 * rate, "how": "timed"}
        return choice.choose_optimizer(base.replace(speed_probe=speed), {})

    # The rate at which the budget's training time holds exactly MUON_BELOW_EPOCHS epochs (training_secs grows
    # with the rate, as a faster network's end takes less): found by bisection, then either side of it.
    low, high = 100.0, 10000.0
    for _ in range(60):
        middle = (low + high) / 2
        speed = {"train": middle, "eval": 3 * middle, "how": "timed"}
        secs = planner.training_secs(300.0, middle, 10000, eval_speedup=planner.planned_eval_speedup(speed))
        low, high = (middle, high) if secs * middle / 50000 < MUON_BELOW_EPOCHS else (low, middle)
    slow, fast = at(0.99 * low), at(1.01 * high)
    assert (slow.optimizer, fast.optimizer) == ("muon", "sgd")
    assert slow.optimizer_choice["epochs"] < MUON_BELOW_EPOCHS <= fast.optimizer_choice["epochs"]
    assert slow.optimizer_choice == {"optimizer": "muon", "epochs": slow.optimizer_choice["epochs"],
                                     "muon_below_epochs": MUON_BELOW_EPOCHS, "muon_learning_rate": 0.12}  # fmt: skip
    # Below MUON_SHORT_BELOW_EPOCHS (half the epochs: half the speed, nearly), airbench94_muon's own rate, unless
    # the rate is given; and a restart keeps the rate its first run took.
    short = at(0.45 * low)
    assert short.optimizer_choice["epochs"] < MUON_SHORT_BELOW_EPOCHS < slow.optimizer_choice["epochs"]
    assert (short.muon_learning_rate, short.optimizer_choice["muon_learning_rate"]) == (MUON_SHORT_RATE, 0.24)
    speed = {"train": 0.45 * low, "eval": 1.35 * low, "how": "timed"}
    given = choice.choose_optimizer(base.replace(speed_probe=speed, muon_learning_rate=0.1), {}, {"muon_learning_rate"})
    assert (given.muon_learning_rate, given.optimizer_choice["muon_learning_rate"]) == (0.1, 0.1)
    assert choice.choose_optimizer(base, {"optimizer_choice": short.optimizer_choice}).muon_learning_rate == 0.24
    # No speed measured (a budget too short to time anything): the original's optimizer.
    none = choice.choose_optimizer(base.replace(speed_probe=None), {})
    assert (none.optimizer, none.optimizer_choice["epochs"]) == ("sgd", None)
    # A restart keeps the first run's choice, whatever the speed now: its checkpoints hold Muon's buffers.
    again = choice.choose_optimizer(fast, {"optimizer": "muon", "optimizer_choice": slow.optimizer_choice})
    assert again.optimizer == "muon" and again.optimizer_choice["kept_from_the_first_run"]
