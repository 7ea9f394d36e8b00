"""The speed probes: this network's training and evaluation images/s on this CPU, and ``--precision auto``.

``network_speed`` times a few training steps of the real network and then its evaluation's batches, side
by side in one graph (about 5 s, bounded in seconds on any CPU), and caches the figures per CPU, network
and TensorFlow version in the ``--probe-cache`` directory (``estimator.common.machine``), so later runs,
and a study's trials, decide at once. The configuration uses them, once, before any graph is built: to
choose the member of ``--network auto``, and to plan ``--time-budget`` (the end's reserve comes from the
evaluation's ratio to training, which differs between CPUs and precisions); hparams.json records them.

bf16 pays only where the CPU computes it natively (AVX512-BF16 or AMX): on an AVX2-only CPU TensorFlow
emulates it and trains 16x slower than fp32 (docs/speed.md), while on a Xeon with AMX it trained
ResNet-20 at 1.45x fp32's speed. So ``choose`` never picks bf16 where the CPU's flags lack native
support (and then times nothing), and otherwise times both and takes the faster.
"""

from __future__ import annotations

import hashlib

import numpy as np
import tensorflow as tf

from estimator.budget import family
from estimator.common import durations, tensor_names
from estimator.common.machine import cache_path, cached_probe, cpu_info, cpu_key, native_bf16, seconds_per_run
from estimator.common.options import Network, Precision, network_shape
from estimator.networks import airbench, layers, registry, resnet
from estimator.ops import filter_gradient, gelu
from estimator.training import machine

CANDIDATES = (Precision.FP32, Precision.BF16)
CACHE_FILE = "network_speed_probe.json"
# A probe's training steps: one untimed, then at most PROBE_STEPS timed, stopped after PROBE_SECS once two
# ran (bounded in seconds: a first run on a slow CPU pays no more than on a fast one); evaluation a third.
PROBE_WARMUP_STEPS = 1
PROBE_STEPS = 6
PROBE_SECS = 1.0
# Training timed alone (fp32's against bf16's, a member's besides the reference's) only decides a choice: half
# as long. The reference's training and evaluation, whose ratio plans the end's reserve, keep the second.
ALONE_PROBE_SECS = PROBE_SECS / 2
# --precision auto: fp32's steps, timed only against bf16's, take at most this many images a tower (a
# first step a quarter as long; per image within 7% of batch 512's, far below bf16's lead: docs/speed.md).
PRECISION_PROBE_BATCH = 128
# --time-budget: below this budget nothing is timed (a first run's probes, 4-15 s, would be a tenth of it);
# the choices are made from what the cache holds, else from estimates, and say so.
PROBED_BUDGET_SECS = 120.0
# --precision auto where bf16 is native but nothing was timed (a short budget, nothing cached): airbench's
# family trains faster in bf16 on every such CPU measured, the ResNets not always (docs/speed.md).
UNTIMED_CHOICE = {Network.AIRBENCH: Precision.BF16}


def affordable(time_budget) -> bool:
    """Whether a job with this ``--time-budget`` (None: none) may time the probes it has no figures for."""
    return time_budget is None or time_budget >= PROBED_BUDGET_SECS


def network_code_digest(paths=None) -> str:
    """A digest of the networks' code (``paths``: by default the modules that build them), part of the
    cache key: a cached speed measured before the network's code changed (GELU fused into XLA kernels
    made airbench's bf16 steps 1.56x faster on a Xeon with AMX, and the evaluation's ratio to them
    smaller) would otherwise plan budgets from figures no longer true."""
    if paths is None:
        paths = [m.__file__ for m in (airbench, registry, resnet, filter_gradient, layers, gelu)]
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:12]


def cache_key(cpu: dict, hp) -> str:
    """This CPU, every setting that shapes the network (``options.network_shape``), and what else decides speed."""
    shape = [getattr(hp, name) for name in network_shape(hp)]
    speed = [hp.train_batch_size // len(hp.towers), hp.data_format, hp.num_intra_threads, hp.num_inter_threads]
    return "|".join(str(v) for v in [cpu_key(cpu), tf.__version__] + shape + speed + [network_code_digest()])


def time_network(
    hp,
    precision: str,
    steps: int = PROBE_STEPS,
    warmup: int = PROBE_WARMUP_STEPS,
    image_size: int = 32,
    max_secs: float = PROBE_SECS,
    evaluate: bool = True,
) -> dict:
    """``{"train": images/s, "eval": images/s}`` of ``hp``'s network in ``precision``, side by side in one
    graph and session of its own, on random images: one tower's training steps (forward, backward, momentum
    update; ``image_size`` pixels a side; bf16 filter gradients as the job will plan them), then its
    inference batches (forward with the moving batch-norm statistics, at the evaluation batch size, as
    the evaluations run it). ``evaluate`` False: ``{"train": images/s}`` alone (no inference graph)."""
    v1 = tf.compat.v1
    batch, eval_batch = (size // len(hp.towers) for size in (hp.train_batch_size, hp.eval_batch_size))
    random = np.random.RandomState(0)
    with tf.Graph().as_default():
        v1.set_random_seed(0)
        images = tf.constant(random.uniform(0, 255, (batch, image_size, image_size, 3)).astype(np.float32))
        eval_images = tf.constant(random.uniform(0, 255, (eval_batch, 32, 32, 3)).astype(np.float32))
        labels = tf.constant(np.arange(batch) % 10, tf.int32)
        plan = filter_gradient.Measured(hp.probe_cache)
        with v1.variable_scope(tensor_names.NETWORK_SCOPE):
            logits = registry.build(hp, True, precision, filter_gradients=plan).forward_pass(images)
        if evaluate:
            with v1.variable_scope(tensor_names.NETWORK_SCOPE, reuse=True):
                predictions = tf.argmax(registry.build(hp, False, precision).forward_pass(eval_images), axis=1)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        step = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
        config = v1.ConfigProto(
            intra_op_parallelism_threads=hp.num_intra_threads, inter_op_parallelism_threads=hp.num_inter_threads
        )
        with v1.Session(config=config) as sess:
            sess.run(v1.global_variables_initializer())
            train = batch / seconds_per_run(sess, step, steps, warmup, max_secs=max_secs)
            if not evaluate:
                return {"train": round(train, 1)}
            eval_secs = None if max_secs is None else max_secs / 3
            inference = eval_batch / seconds_per_run(sess, predictions, steps, 1, max_secs=eval_secs)
    return {"train": round(train, 1), "eval": round(inference, 1)}


def network_speed(hp, cpu=None, timer=None, cache_file=None, measure=True, evaluate=True) -> dict:
    """``{"train": images/s, "eval": images/s}`` of ``hp``'s network in ``hp.precision`` on this CPU: timed once
    (``time_network``, a few seconds) and cached per CPU, network, batch sizes and TensorFlow version in
    ``hp.probe_cache``. What ``--network auto`` compares the family's members by, and what ``--time-budget``
    plans with: the evaluation's ratio to training (which differs between CPUs, networks and precisions:
    docs/speed.md) decides the end's reserve. ``measure`` False: only what is cached (None where nothing is).
    ``evaluate`` False: ``{"train": images/s}``, from the whole entry where one is cached, else timed alone and
    cached apart."""
    cpu = cpu or cpu_info()
    path = cache_file or cache_path(CACHE_FILE, hp.probe_cache)
    key = "|".join((cache_key(cpu, hp), str(hp.precision), str(hp.eval_batch_size // len(hp.towers))))
    timer = timer or time_network  # looked up as it runs: the tests' simulated CPU replaces it
    whole, _ = cached_probe(
        path, key, ("train", "eval"), (lambda: timer(hp, hp.precision)) if measure and evaluate else None
    )
    if whole or evaluate:
        return whole if evaluate else {"train": whole["train"]}
    train_only = (lambda: timer(hp, hp.precision, max_secs=ALONE_PROBE_SECS, evaluate=False)) if measure else None
    return cached_probe(path, key + "|train", ("train",), train_only)[0]


def untimed_reason(hp, cpu=None) -> str:
    """Why ``--precision auto`` chose without timing (``choose`` gave an empty probe), for the log."""
    if not native_bf16(cpu or cpu_info()):
        return "this CPU lacks native bf16"
    budget = durations.format_clock(PROBED_BUDGET_SECS)
    return "not timed in a budget under %s; by estimate for the %s network" % (budget, hp.network)


def choose(hp, cpu=None, timer=None, cache_file=None, measure=True):
    """``(precision, probe)``: the faster of fp32 and bf16 for ``hp``'s network on this CPU.

    ``probe`` maps each precision timed to its training images/s; it is empty where bf16 is not native
    here (the CPU's flags, or ``ONEDNN_MAX_CPU_ISA`` holding oneDNN below bf16: then fp32, and nothing is
    timed). Each precision's figures are ``network_speed``'s, cached with them: bf16's whole (where it is
    native, it trained every member of the family but x0.375 (1.03x) 1.29-1.58x as fast as fp32 on the Zen 5, so its
    evaluation is the one the budget will plan with), fp32's training alone, at ``PRECISION_PROBE_BATCH``
    images a tower at most (its evaluation, and its speed at the job's batch, are timed only where fp32
    wins). ``measure`` False: from what is cached, else ``UNTIMED_CHOICE``'s estimate (an empty probe).
    """
    cpu = cpu or cpu_info()
    if not native_bf16(cpu):
        return Precision.FP32, {}
    fp32_batch = min(hp.train_batch_size, PRECISION_PROBE_BATCH * len(hp.towers))
    fp32, bf16 = CANDIDATES
    probed = {fp32: hp.replace(precision=fp32, train_batch_size=fp32_batch), bf16: hp.replace(precision=bf16)}
    speeds = {p: network_speed(probed[p], cpu, timer, cache_file, measure, p == bf16) for p in CANDIDATES}
    if None in speeds.values():
        return UNTIMED_CHOICE.get(hp.network, Precision.FP32), {}
    probe = {p: speed["train"] for p, speed in speeds.items()}
    return max(CANDIDATES, key=lambda p: probe[p]), probe


def resolve_precision(hp, cpu: dict):
    """``hp`` with ``--precision auto`` chosen by measurement (``choose``); any other precision as given."""
    if hp.precision != Precision.AUTO:
        return hp
    chosen, probe = choose(hp.replace(precision=Precision.FP32), cpu=cpu, measure=affordable(hp.time_budget))
    return hp.replace(precision=chosen, precision_probe=probe)


def measure_this_machine(hp, earlier: dict, cpu: dict, speed=None):
    """What the budget's plan needs to know about this CPU, resolved once and recorded in hparams.json: for
    ``--time-budget``, this network's speeds (``speed``, where ``--network auto`` had them already; a restart
    on another CPU kind times its own, and plans from them), and, under a budget too short to time anything,
    the bf16 filter-gradient plan from what is cached (``config.resolve`` measures it otherwise)."""
    if hp.num_gpus > 0 or hp.cluster.task_type == "ps":  # a parameter server builds no training graph
        return hp
    measure = affordable(hp.time_budget)
    if hp.precision == Precision.BF16 and not measure and earlier.get("filter_gradients") is None:
        hp = hp.replace(filter_gradients=machine.filter_gradient_plan(hp, cpu, measure=False))
    if hp.time_budget:
        here = cpu_key(cpu)
        kept = earlier.get("speed_probe") or {}
        if speed is None and kept.get("cpu") == here:
            speed = kept
        elif speed is None:
            speed = network_speed(hp, cpu=cpu, measure=measure)
            speed = speed and dict(speed, how=family.TIMED)
        hp = hp.replace(speed_probe=speed and dict(speed, cpu=here))
    return hp
