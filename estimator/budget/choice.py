"""``--network auto``: the member of airbench's family a budget affords on this machine, in one call; and
``--optimizer auto``: Muon where that budget affords the network few epochs (``choose_optimizer``), each member
expected by the table of the optimizer its epochs would take.

``choose_network`` times the family's reference member (``probes``), estimates the others from it
(``family.estimated_rate``), times the training of those whose estimate leaves the choice open
(``family.worth_timing``), and lets ``family.choose`` pick by the table of accuracy against epochs, each member's
epochs counted in the training time its own end leaves it (``planner.training_secs``). A job dir that recorded a
choice keeps it.
"""

from __future__ import annotations

from estimator.budget import family, planner, probes
from estimator.common.options import Network, Optimizer, Precision
from estimator.training.hparams import MUON_BELOW_EPOCHS, MUON_SHORT_BELOW_EPOCHS, MUON_SHORT_RATE


def choose_network(hp, earlier: dict, cpu: dict, given):
    """``--network auto``: the member of airbench's family for ``hp``'s budget on this machine, as HParams
    values (its network, shape and augmentation, and ``network_choice``, the record of why), and its
    speeds (``HParams.speed_probe``; None where the choice was kept). A job dir that recorded a choice
    keeps it: the checkpoints are that member's."""
    speed = None
    if earlier.get("network_choice"):
        recorded = earlier["network_choice"]
        member, record = family.member(recorded["member"]), dict(recorded, kept_from_the_first_run=True)
        probe = earlier.get("precision_probe") or {}
    else:
        member, record, probe, speed = _measure_and_choose(hp, cpu, given)
    # The member's settings, but its augmentation where the command line gave one by hand.
    chosen_values = {k: v for k, v in member.settings().items() if k not in given or k not in family.AUGMENTATION}
    chosen_values["network_choice"] = record
    if hp.precision == Precision.AUTO:  # chosen with the reference member: not timed again
        chosen_values.update(precision=record["precision"], precision_probe=probe)
    return chosen_values, speed


def choose_optimizer(hp, earlier: dict, given=frozenset()):
    """``--optimizer auto``: ``hp`` with Muon where its budget affords the network fewer than ``MUON_BELOW_EPOCHS``
    epochs at the speed measured (``hp.speed_probe``; none measured: SGD), else SGD, and ``optimizer_choice``, the
    record of why; below ``MUON_SHORT_BELOW_EPOCHS`` at ``MUON_SHORT_RATE`` unless ``given`` names the rate. A job
    dir keeps its first run's optimizer and rate: its checkpoints hold that optimizer's slots."""
    if earlier.get("optimizer_choice"):
        record = dict(earlier["optimizer_choice"], kept_from_the_first_run=True)
        if record["optimizer"] == Optimizer.MUON and "muon_learning_rate" not in given:
            # The rate the first run trained with (its hparams.json's, where its record predates the key).
            first = record.get("muon_learning_rate", earlier.get("muon_learning_rate"))
            hp = hp.replace(muon_learning_rate=first or hp.muon_learning_rate)
        return hp.replace(optimizer=Optimizer(record["optimizer"]), optimizer_choice=record)
    epochs, optimizer = None, Optimizer.SGD
    if hp.speed_probe:
        training_secs, step_cost = _training_time(hp, hp.speed_probe)
        rate = hp.speed_probe["train"]
        epochs = round(family.epochs_in(training_secs(rate), rate, hp.num_train_examples, step_cost), 2)
        optimizer = optimizer_for(hp)(epochs)
    record = {"optimizer": str(optimizer), "epochs": epochs, "muon_below_epochs": MUON_BELOW_EPOCHS}
    if optimizer == Optimizer.MUON:
        if epochs < MUON_SHORT_BELOW_EPOCHS and "muon_learning_rate" not in given:
            hp = hp.replace(muon_learning_rate=MUON_SHORT_RATE)
        record["muon_learning_rate"] = hp.muon_learning_rate
    return hp.replace(optimizer=optimizer, optimizer_choice=record)


def optimizer_for(hp):
    """``epochs -> the optimizer`` ``hp`` trains with in that many: ``--optimizer auto``'s rule, else the one named."""
    if hp.optimizer == Optimizer.AUTO:
        return lambda epochs: Optimizer.MUON if epochs < MUON_BELOW_EPOCHS else Optimizer.SGD
    return lambda epochs: hp.optimizer


def _measure_and_choose(hp, cpu: dict, given: set):
    """Times the family's reference member (``_reference_speed``), estimates the others from it, times the
    training of those whose estimate leaves the choice open (``family.worth_timing``), and lets
    ``family.choose`` pick. All cached per CPU.
    Returns ``(member, record, precision probe, the chosen member's speeds)``."""
    measure, optimizer = probes.affordable(hp.time_budget), optimizer_for(hp)
    precision, probe, measured = _reference_speed(hp, cpu, measure)
    reference_speed = measured or dict(family.ASSUMED_REFERENCE_SPEED)
    rates = _estimated_rates(hp, given, precision, reference_speed, timed=bool(measured))
    training_secs, step_cost = _training_time(hp, reference_speed)
    if measure:
        for name in family.worth_timing(
            rates, hp.num_train_examples, training_secs, step_cost, optimizer_for=optimizer
        ):
            rates[name] = (_timed_training_rate(hp, cpu, name, precision), family.TIMED)
    member, record = family.choose(
        hp.time_budget, rates, hp.num_train_examples, training_secs, step_cost=step_cost, optimizer_for=optimizer
    )
    record["precision"] = str(precision)
    return member, record, probe, _chosen_speed(member.name, rates, reference_speed)


def _training_time(hp, speed: dict):
    """``(training_secs(rate), step_cost)``: the seconds of training ``hp``'s budget leaves a network of that
    training images/s, its end at ``speed``'s evaluation ratio; and a step's mean cost at ``hp``'s image sizes."""
    always, views = hp.evaluation_images()
    eval_speedup = planner.planned_eval_speedup(speed)
    step_cost = hp.image_sizes.mean_cost(0.0, 1.0) if hp.image_sizes else 1.0
    return lambda rate: planner.training_secs(hp.time_budget, rate, always, views, eval_speedup=eval_speedup), step_cost


def _member_hp(hp, member, precision):
    """``hp`` with the network and shape of the family's ``member``, in ``precision``: what its probes time."""
    shape = {name: getattr(member, name) for name in family.SHAPE}
    return hp.replace(network=Network.AIRBENCH, precision=precision, **shape)


def _reference_speed(hp, cpu: dict, measure: bool):
    """``(precision, precision probe, speeds)``: the precision ``--precision`` gives or ``auto`` chooses on
    the reference member, and the reference's ``{"train", "eval"}``
    images/s in it (None where nothing is cached and ``measure`` is False)."""
    reference = family.member(family.REFERENCE)
    precision, probe = hp.precision, {}
    if hp.precision == Precision.AUTO:
        reference_hp = _member_hp(hp, reference, Precision.FP32)
        precision, probe = probes.choose(reference_hp, cpu=cpu, measure=measure)
    return precision, probe, probes.network_speed(_member_hp(hp, reference, precision), cpu=cpu, measure=measure)


def _estimated_rates(hp, given: set, precision, reference_speed: dict, timed: bool) -> dict:
    """``{member: (training images/s, how it was had)}`` for the candidates (a shape given by hand narrows
    the family): the reference's as timed (``timed``: else assumed), the others' estimated from it
    (``family.estimated_rate``)."""
    estimated = family.ESTIMATED if timed else family.ESTIMATED + ", " + family.ASSUMED
    rates = {}
    for m in family.MEMBERS:
        if any(getattr(m, name) != getattr(hp, name) for name in family.SHAPE if name in given):
            continue
        if timed and m.name == family.REFERENCE:
            rates[m.name] = (reference_speed["train"], family.TIMED)
        else:
            rates[m.name] = (family.estimated_rate(m.name, reference_speed["train"], precision), estimated)
    return rates


def _timed_training_rate(hp, cpu: dict, name: str, precision):
    """Member ``name``'s training images/s: timed alone at its probe batch (``family.probe_batch``), or cached. Its
    evaluation is planned at the reference's ratio, as every member was compared (timed at the job's
    batches, members' own lay within 10% of it on the Zen 4 and 5), and timing it cost a first run 0.7-0.8 s
    more."""
    member_hp = _member_hp(hp, family.member(name), precision)
    member_hp = member_hp.replace(train_batch_size=family.probe_batch(name, hp.train_batch_size))
    return probes.network_speed(member_hp, cpu=cpu, evaluate=False)["train"]


def _chosen_speed(name: str, rates: dict, reference_speed: dict) -> dict:
    """The chosen member's speeds as ``HParams.speed_probe`` records them: its training images/s as had,
    its evaluation's at the reference's ratio to training."""
    train, how = rates[name]
    ratio = reference_speed["eval"] / reference_speed["train"]
    speed = {"train": round(train, 1), "eval": round(train * ratio, 1), "how": how}
    if how == family.TIMED and name != family.REFERENCE:  # the reference's evaluation was timed, not this one's
        speed["eval_how"] = "at %s's ratio to training" % family.REFERENCE
    return speed
