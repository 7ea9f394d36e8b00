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

from estimator.common import durations, logs, tensor_names
from estimator.common.machine import (
    cache_path,
    cached_probe,
    cpu_info,
    cpu_key,
    forget_probes,
    native_bf16,
    seconds_per_run,
    store_probe,
)
from estimator.common.options import Network, Precision
from estimator.networks import airbench, family, layers, registry, resnet
from estimator.ops import filter_gradient, gelu

CANDIDATES = ("fp32", "bf16")
CACHE_FILE = "network_speed_probe.json"
# A probe's training steps: a few untimed (graph optimisation, kernel selection, XLA), then at most
# PROBE_STEPS timed, stopped after PROBE_SECS once two ran: bounded in seconds, so that a first run on a
# slow CPU pays no more than on a fast one (airbench94's 11 fixed steps of 512 images took 36 s on an
# AVX2-only EPYC). The evaluation's batches get a third of that.
PROBE_WARMUP_STEPS = 1
PROBE_STEPS = 6
PROBE_SECS = 1.0
# Training timed alone (fp32's to compare with bf16's, a member's besides the reference's) decides a
# choice, and the job re-plans from its own steps: half as long (at least two steps still). The
# reference's training and evaluation, whose ratio the end's reserve is planned with, keep the second.
ALONE_PROBE_SECS = PROBE_SECS / 2
# --precision auto: fp32's training steps, timed only to compare with bf16's, take at most this many
# images a tower. The first of them (kernels chosen, graph optimised) took 1.1-1.35 s at 512 on a Zen 4,
# 0.35 at 128; per image, the reference member in fp32 ran at 128 at 0.93 of its speed at 512 there
# (859 against 921 images/s; airbench94 at 0.97-1.00 on the Zen 4 and 5): a bias toward bf16 far below
# bf16's lead on the reference where it is native (1.40x there, 1.36x on a Zen 5: docs/speed.md).
PRECISION_PROBE_BATCH = 128
# --precision auto for airbench where bf16 is native: bf16 trained the reference 1.36x (Zen 5), 1.40x (Zen 4)
# and 2.2x (Xeon with AMX) as fast as fp32, 1.46x and more against fp32 at PRECISION_PROBE_BATCH. A lead
# under this is in doubt: one busy process beside bf16's timing on a Zen 4 cut it to 1.05x (a container's
# slow spell to about 1.15x), and the member chosen from that reference trained about half the steps.
DOUBTED_BF16_LEAD = 1.2
# --time-budget: below this budget nothing is timed (a first run's probes, 4-15 s, would be a tenth of it);
# the choices are made from what the cache holds, else from estimates, and say so.
PROBED_BUDGET_SECS = 120.0
# --precision auto where bf16 is native but neither precision was timed (a budget under PROBED_BUDGET_SECS,
# nothing cached): airbench's family trained in bf16 at 1.26-3.25x fp32's images/s for every member on the
# Zen 4, the Zen 5 and the Xeon with AMX, but x0.375 at 0.99-1.06x (docs/speed.md); the ResNets not always
# (ResNet-14 1.5x wide at 0.45x on that Xeon): fp32 for them, which every CPU computes natively.
UNTIMED_CHOICE = {Network.AIRBENCH: Precision.BF16}
# A run that trained at full size this many times as fast as its network's timed figure shows that figure was
# timed in a slow spell (a VM's, another process's), which ``time_again`` does not catch where it lasts through
# both timings: calm runs trained at 0.90-1.06x it (the 5-minute recipe's full-size half, airbench94 x0.5 in bf16
# on the Zen 4, four runs, against its cached 1,400 images/s: benchmarks/results/first_vs_cached_5min_zen4_*.json);
# a spell that made a container's reference 0.73 of its speed would show as 1.2-1.45x.
SLOW_FIGURE_RATIO = 1.2
# ... and this many times a figure estimated from a timing (the chosen member's, or a member's not chosen against its
# estimate from the run's speed): beyond an estimate's own error (``family.ESTIMATE_SPREAD``). Calm on the Zen 4,
# x0.75 timed at 687 images/s (at its probe batch, 128) lies 1.25x below its estimate from the 1,434 at which x0.5
# trained at full size in the 5-minute recipe (2026-11-29); two busy processes through both its timings left it 2.34x.
SLOW_ESTIMATE_RATIO = SLOW_FIGURE_RATIO * family.ESTIMATE_SPREAD


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


def machine_key(cpu: dict) -> str:
    """Where every cache key begins: this CPU and the TensorFlow version (all of this machine's figures)."""
    import tensorflow as tf

    return "%s|%s" % (cpu_key(cpu), tf.__version__)


def cache_key(cpu: dict, hp) -> str:
    return "|".join(
        str(v)
        for v in (
            machine_key(cpu),
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
    import numpy as np
    import tensorflow as tf

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


def time_training_steps(
    hp, precision: str, steps: int = PROBE_STEPS, warmup: int = PROBE_WARMUP_STEPS, image_size: int = 32
) -> float:
    """Training images/s of ``hp``'s network in ``precision`` (``time_network``'s, ``steps`` at most)."""
    return time_network(hp, precision, steps, warmup, image_size, max_secs=None, evaluate=False)["train"]


def network_speed(hp, cpu=None, timer=None, cache_file=None, measure=True, evaluate=True) -> dict:
    """``timed_network_speed``'s figures alone."""
    return timed_network_speed(hp, cpu, timer, cache_file, measure, evaluate)[0]


def timed_network_speed(hp, cpu=None, timer=None, cache_file=None, measure=True, evaluate=True):
    """``(speeds, timed now)``: ``{"train": images/s, "eval": images/s}`` of ``hp``'s network in ``hp.precision`` on
    this CPU: timed once (``time_network``, a few seconds) and cached per CPU, network, batch sizes and TensorFlow
    version in ``hp.probe_cache``. What ``--network auto`` compares the family's members by, and what
    ``--time-budget`` plans with: the evaluation's ratio to training (which differs between CPUs, networks and
    precisions: docs/speed.md) decides the end's reserve. ``measure`` False: only what is cached (None where nothing
    is). ``evaluate`` False: ``{"train": images/s}``, from the whole entry where one is cached, else timed alone and
    cached apart. ``timed now``: not from the cache (a first timing, which a doubt may have timed again)."""
    cpu = cpu or cpu_info()
    path = cache_file or cache_path(CACHE_FILE, hp.probe_cache)
    key = _speed_key(cpu, hp)
    timer = timer or time_network  # looked up as it runs: the tests' simulated CPU replaces it
    whole, timed = cached_probe(
        path, key, ("train", "eval"), (lambda: timer(hp, hp.precision)) if measure and evaluate else None
    )
    if whole or evaluate:
        return (whole if evaluate else {"train": whole["train"]}), timed
    train_only = (lambda: timer(hp, hp.precision, max_secs=ALONE_PROBE_SECS, evaluate=False)) if measure else None
    return cached_probe(path, key + "|train", ("train",), train_only)


def _speed_key(cpu: dict, hp) -> str:
    return "|".join((cache_key(cpu, hp), str(hp.precision), str(hp.eval_batch_size // len(hp.towers))))


def time_again(hp, first: dict, cpu=None, timer=None, cache_file=None) -> dict:
    """``first`` (``network_speed``'s figures of ``hp``, timed once) after ``hp``'s training is timed once more,
    alone: the faster of the two timings, cached in place of the first. For a timing in doubt (``config``: a member
    timed beyond the spread of its estimate from the reference; ``choose``: bf16's lead under
    ``DOUBTED_BF16_LEAD``): a VM can run at half its speed for tens of seconds, and one such spell during the
    reference's 1 s made a container's first run take it at 0.73 of its speed and choose a member that trained 400
    steps where 700-870 were usual. The second timing catches a spell (or another process's burst) that ends before
    it; one that lasts through both only after training (``forget_slow_figures``): that run chose from slow figures,
    and re-planned only its steps from its own speed. The evaluation's figure, where ``first`` has one, moves with
    training's: their ratio, timed side by side, plans the end's reserve."""
    cpu = cpu or cpu_info()
    timer = timer or time_network
    again = timer(hp, hp.precision, max_secs=ALONE_PROBE_SECS, evaluate=False)["train"]
    if again <= first["train"]:
        return dict(first)
    kept = {name: round(value * again / first["train"], 1) for name, value in first.items()}
    key = _speed_key(cpu, hp) + ("" if "eval" in first else "|train")
    store_probe(cache_file or cache_path(CACHE_FILE, hp.probe_cache), key, kept)
    return kept


def forget_slow_figures(hp, images_per_sec, cpu=None, cache_file=None):
    """After training: where the run's own full-size speed (``images_per_sec``, as the planner measured it) shows
    a figure it chose from was timed in a slow spell (``slow_figure``), this CPU's figures are dropped from the
    cache, so that the next run, or a study's next trial, times them again instead of choosing its member and
    planning from a slow spell's figures. Returns the log's line where it dropped them, else None."""
    cpu = cpu or cpu_info()
    reason = slow_figure(hp, images_per_sec, cpu_key(cpu))
    if reason is None:
        return None
    path = cache_file or cache_path(CACHE_FILE, hp.probe_cache)
    dropped = forget_probes(path, machine_key(cpu))
    if not dropped:
        return None
    return (
        "speed probes: %s: timed in a slow spell. This CPU's %d cached figure(s) in %s are dropped: the next run "
        "times them again" % (reason, dropped, path)
    )


def slow_figure(hp, images_per_sec, here: str):
    """Why the run's full-size speed ``images_per_sec`` on CPU ``here`` shows a figure it chose from slow, else
    None: its network's own (``_slow_own_figure``), or a member's timed and not chosen (``_slow_member``). Only
    figures timed on ``here``, and only a one-machine job judges: a cluster's steps are every worker's."""
    probe = hp.speed_probe or {}
    if not images_per_sec or not probe.get("train") or probe.get("cpu") != here or hp.num_workers != 1:
        return None
    return _slow_own_figure(probe, images_per_sec) or _slow_member(hp.network_choice, images_per_sec, hp.precision)


def _slow_own_figure(probe: dict, images_per_sec: float):
    """The network's figure (``HParams.speed_probe``) as slow: timed, at ``SLOW_FIGURE_RATIO`` or more times
    below the run's speed; estimated from the reference's timing, ``SLOW_ESTIMATE_RATIO``. An assumed figure is
    no figure of this CPU's."""
    limit = {"timed": SLOW_FIGURE_RATIO, family.ESTIMATED: SLOW_ESTIMATE_RATIO}.get(probe.get("how"))
    ratio = images_per_sec / probe["train"]
    if not limit or ratio < limit:
        return None
    return "this run trained at %.2fx the speed %s for its network (%.0f against %.0f img/s), beyond %gx" % (
        ratio,
        probe["how"],
        images_per_sec,
        probe["train"],
        round(limit, 2),
    )


def _slow_member(choice, images_per_sec: float, precision):
    """A member timed and not chosen (``choice``: ``HParams.network_choice``) whose figure lies ``SLOW_ESTIMATE_RATIO``
    or more below its estimate from the run's speed: a spell through both its timings (the reference's too, where
    another member was chosen) would otherwise leave it out of every later choice."""
    for candidate in (choice or {}).get("candidates", ()):
        if candidate["speed"] != "timed" or candidate["member"] == choice["member"]:
            continue
        relative = family.estimated_rate(candidate["member"], 1.0, precision)
        expected = images_per_sec * relative / family.estimated_rate(choice["member"], 1.0, precision)
        if expected >= SLOW_ESTIMATE_RATIO * candidate["images_per_sec"]:
            return (
                "%s, not chosen, was timed at %.0f img/s, %.2fx below its estimate from this run's speed (%.0f img/s), "
                "beyond %gx"
                % (
                    candidate["member"],
                    candidate["images_per_sec"],
                    expected / candidate["images_per_sec"],
                    expected,
                    round(SLOW_ESTIMATE_RATIO, 2),
                )
            )
    return None


def _untimed_choice(hp):
    return UNTIMED_CHOICE.get(hp.network, Precision.FP32)


def untimed_reason(hp, cpu=None) -> str:
    """Why ``--precision auto`` chose without timing (``choose`` gave an empty probe), for the log."""
    if not native_bf16(cpu or cpu_info()):
        return "this CPU lacks native bf16"
    return "not timed in a budget under %s; %s by estimate for the %s network" % (
        durations.format_clock(PROBED_BUDGET_SECS),
        _untimed_choice(hp),
        hp.network,
    )


def _timed_again(probed: dict, speeds: dict, cpu: dict, timer, cache_file):
    """``(speeds, the log's line)`` for a doubted precision probe (bf16's lead under ``DOUBTED_BF16_LEAD``):
    both precisions timed again, each kept at its faster (``time_again``). Where fp32 is still ahead, bf16's
    figure is not kept in the cache: a spell through both of bf16's timings would otherwise have every later
    run on this machine, and a study's every trial, train in fp32 (airbench94 x0.375 in fp32, 85.10%, where
    x0.5 in bf16 makes 86.0-86.7% in 5 minutes on a Zen 4); the next run times it again."""
    first = {p: speed["train"] for p, speed in speeds.items()}
    speeds = {p: time_again(probed[p], speeds[p], cpu, timer, cache_file) for p in CANDIDATES}
    line = "bf16 timed at %.2fx fp32's speed (%.0f against %.0f img/s), under %gx: both timed again, " % (
        first["bf16"] / first["fp32"],
        first["bf16"],
        first["fp32"],
        DOUBTED_BF16_LEAD,
    ) + "the faster kept (%.0f and %.0f)" % (speeds["bf16"]["train"], speeds["fp32"]["train"])
    if speeds["fp32"]["train"] > speeds["bf16"]["train"]:
        path = cache_file or cache_path(CACHE_FILE, probed["bf16"].probe_cache)
        if forget_probes(path, _speed_key(cpu, probed["bf16"])):
            line += "; fp32 still ahead: bf16's figure is not cached, the next run times it again"
    return speeds, line


def choose(hp, cpu=None, timer=None, cache_file=None, measure=True, doubts=None):
    """``(precision, probe)``: the faster of fp32 and bf16 for ``hp``'s network on this CPU.

    ``probe`` maps each precision timed to its training images/s; it is empty where bf16 is not native
    here (the CPU's flags, or ``ONEDNN_MAX_CPU_ISA`` holding oneDNN below bf16: then fp32, and nothing is
    timed). Each precision's figures are ``network_speed``'s, cached with them: bf16's whole (where it is
    native, it trained every member of the family but x0.375 (1.03x) 1.29-1.58x as fast as fp32 on the Zen 5, so its
    evaluation is the one the budget will plan with), fp32's training alone, at ``PRECISION_PROBE_BATCH``
    images a tower at most (its evaluation, and its speed at the job's batch, are timed only where fp32
    wins). ``measure`` False: from what is cached, else ``UNTIMED_CHOICE``'s estimate (an empty probe). A
    first timing that ``UNTIMED_CHOICE`` barely holds (bf16 for airbench, its lead under ``DOUBTED_BF16_LEAD``)
    is in doubt: both are timed again, and the log says so, or, where the caller records it, ``doubts`` (a
    list) gets the line.
    """
    cpu = cpu or cpu_info()
    if not native_bf16(cpu):
        return "fp32", {}
    fp32_batch = min(hp.train_batch_size, PRECISION_PROBE_BATCH * len(hp.towers))
    probed = {"fp32": hp.replace(precision="fp32", train_batch_size=fp32_batch), "bf16": hp.replace(precision="bf16")}
    timed = {p: timed_network_speed(probed[p], cpu, timer, cache_file, measure, p == "bf16") for p in CANDIDATES}
    speeds, fresh = {p: speed for p, (speed, _) in timed.items()}, any(now for _, now in timed.values())
    if None in speeds.values():
        return _untimed_choice(hp), {}
    lead = speeds["bf16"]["train"] / speeds["fp32"]["train"]
    if fresh and lead < DOUBTED_BF16_LEAD and _untimed_choice(hp) == Precision.BF16:
        speeds, doubt = _timed_again(probed, speeds, cpu, timer, cache_file)
        if doubts is None:
            logs.warning("--precision auto: %s", doubt)
        else:
            doubts.append(doubt)
    probe = {p: speed["train"] for p, speed in speeds.items()}
    return max(CANDIDATES, key=lambda p: probe[p]), probe
