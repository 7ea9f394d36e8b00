"""``--precision auto``: the faster of fp32 and bf16 on this machine, by measurement.

bf16 pays only where the CPU computes it natively (AVX512-BF16 or AMX): on
an AVX2-only CPU TensorFlow emulates it and trains 16x slower than fp32
(docs/speed.md), while on a Xeon with AMX it trained ResNet-20 at
1.45x fp32's speed here. So ``choose`` never picks bf16 where the CPU's flags
lack native support (and then times nothing), and otherwise times a few
training steps of the real network in each precision and takes the faster.
The result is cached per CPU model, network and TensorFlow version in
``~/.cache/cifar10-resnet-estimator/precision_probe.json`` (``$CIFAR10_CACHE_DIR``
overrides the directory), so later runs decide at once.

The same probe times the evaluation's forward passes against training steps
(``evaluation_speedup``): ``--time-budget`` reserves the end of the budget for
the final evaluations from that ratio, which differs between CPUs and precisions.
"""

from __future__ import annotations

import hashlib

from estimator.networks import airbench, layers, registry, resnet
from estimator.ops import filter_gradient, gelu
from estimator.ops.probe_cache import cache_path, cached_probe, cpu_info, cpu_key, native_bf16, seconds_per_run

CANDIDATES = ("fp32", "bf16")
CACHE_FILE = "precision_probe.json"
EVAL_CACHE_FILE = "evaluation_speed_probe.json"
TRAIN_CACHE_FILE = "training_speed_probe.json"
PROBE_WARMUP_STEPS = 3
PROBE_STEPS = 8


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
    import tensorflow as tf

    return "|".join(
        str(v)
        for v in (
            cpu_key(cpu),
            tf.__version__,
            hp.network,
            hp.num_layers,
            hp.resnet_version,
            hp.width_multiplier,
            hp.group_depth,
            hp.train_batch_size // len(hp.towers),
            hp.data_format,
            hp.num_intra_threads,
            hp.num_inter_threads,
            network_code_digest(),
        )
    )


def _timed_batches(hp, precision: str, training: bool, steps: int, warmup: int, image_size: int = 32) -> float:
    """Images/s of one tower's batches of the real network on random images, in a graph and session of
    its own: training steps (forward, backward, momentum update) or inference (forward with the moving
    batch-norm statistics, at the evaluation batch size, as the evaluations run it)."""
    import numpy as np
    import tensorflow as tf

    v1 = tf.compat.v1
    batch = (hp.train_batch_size if training else hp.eval_batch_size) // len(hp.towers)
    with tf.Graph().as_default():
        v1.set_random_seed(0)
        shape = (batch, image_size, image_size, 3)
        images = tf.constant(np.random.RandomState(0).uniform(0, 255, shape).astype(np.float32))
        labels = tf.constant(np.arange(batch) % 10, tf.int32)
        with v1.variable_scope("resnet"):
            model = registry.build(hp, training, precision)
            logits = model.forward_pass(images)
        if training:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            step = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
        else:
            step = tf.argmax(logits, axis=1)
        config = v1.ConfigProto(
            intra_op_parallelism_threads=hp.num_intra_threads, inter_op_parallelism_threads=hp.num_inter_threads
        )
        with v1.Session(config=config) as sess:
            sess.run(v1.global_variables_initializer())
            return batch / seconds_per_run(sess, step, steps, warmup)


def time_training_steps(
    hp, precision: str, steps: int = PROBE_STEPS, warmup: int = PROBE_WARMUP_STEPS, image_size: int = 32
) -> float:
    """Training images/s of the real network (forward, backward, momentum update) in ``precision``,
    on random images of one tower's batch (``image_size`` pixels a side), in a graph and session of its own."""
    return _timed_batches(hp, precision, True, steps, warmup, image_size)


def time_evaluation_batches(hp, precision: str, steps: int = PROBE_STEPS, warmup: int = PROBE_WARMUP_STEPS) -> float:
    """Inference images/s of the real network in ``precision`` at one tower's evaluation batch."""
    return _timed_batches(hp, precision, False, steps, warmup)


def evaluation_speedup(hp, cpu=None, timers=(time_training_steps, time_evaluation_batches), cache_file=None):
    """How many times training's images/s the evaluation runs, for ``hp``'s network in ``hp.precision``
    on this CPU: both timed side by side (a few seconds) and cached like the precision probe.

    ``--time-budget`` reserves the time of the final evaluations from it: the ratio depends on the
    CPU, the network and the precision (3.4 for the airbench network in fp32 on an AVX2-only EPYC), so
    a fixed guess either
    wastes the end of short budgets or overruns them.

    Returns:
      ``(ratio, probe)``: the ratio, and ``{"train": images/s, "eval": images/s}`` as measured.
    """
    cpu = cpu or cpu_info()
    path = cache_file or cache_path(EVAL_CACHE_FILE, hp.probe_cache)
    key = "|".join((cache_key(cpu, hp), hp.precision, str(hp.eval_batch_size // len(hp.towers))))
    train, evaluate = timers
    probe, _ = cached_probe(
        path,
        key,
        ("train", "eval"),
        lambda: {"train": round(train(hp, hp.precision), 1), "eval": round(evaluate(hp, hp.precision), 1)},
    )
    return probe["eval"] / probe["train"], probe


def training_speed(hp, cpu=None, timer=time_training_steps, cache_file=None) -> float:
    """Training images/s of ``hp``'s network in ``hp.precision`` on this CPU (a few steps; cached like the
    other probes): what ``--network auto`` compares the family's members by."""
    cpu = cpu or cpu_info()
    path = cache_file or cache_path(TRAIN_CACHE_FILE, hp.probe_cache)
    key = "|".join((cache_key(cpu, hp), hp.precision))
    probe, _ = cached_probe(path, key, ("train",), lambda: {"train": round(timer(hp, hp.precision), 1)})
    return probe["train"]


def choose(hp, cpu=None, timer=time_training_steps, cache_file=None):
    """``(precision, probe)``: the faster of fp32 and bf16 for ``hp``'s network on this CPU.

    ``probe`` maps each precision timed to its images/s; it is empty where bf16 is not native here (the
    CPU's flags, or ``ONEDNN_MAX_CPU_ISA`` holding oneDNN below bf16: then fp32, and nothing is timed).
    """
    cpu = cpu or cpu_info()
    if not native_bf16(cpu):
        return "fp32", {}
    path = cache_file or cache_path(CACHE_FILE, hp.probe_cache)
    probe, _ = cached_probe(
        path, cache_key(cpu, hp), CANDIDATES, lambda: {p: round(timer(hp, p), 1) for p in CANDIDATES}
    )
    return max(CANDIDATES, key=lambda p: probe[p]), probe
