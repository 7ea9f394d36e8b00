"""The budget's two calls from a job: ``choose`` while the configuration resolves the flags, ``BudgetedJob``
while ``estimator.train.run`` trains. A job that asks for neither a budget nor an auto choice never imports
this package (``estimator.cifar10_main``).

* ``choose(hp, recorded, cpu, given)``: ``--network auto`` (``choice``), ``--precision auto`` and the speeds a
  ``--time-budget`` plans with (``probes``), then ``--optimizer auto`` (``choice``), each said in the log once;
* ``BudgetedJob(hp)``: the job's guest (``estimator.training.guest``): the planner (``planner``) and what runs it
  beside training (``hooks``): the progress line's plan, the hook that stops training, the checkpoints' timer, the
  test views that still fit, and results.json's record of the run's time.
"""

from __future__ import annotations

import time

from estimator.budget import choice, family, probes
from estimator.budget import hooks as budget_hooks
from estimator.budget import planner as planner_lib
from estimator.common import durations, logs, processes
from estimator.common.options import Network, Optimizer
from estimator.training import config
from estimator.training import hooks as training_hooks
from estimator.training.guest import Guest


def choose(hp, recorded: dict, cpu: dict, given):
    """``hp`` with what this machine affords resolved: the member of ``--network auto``, the precision of
    ``--precision auto``, and for ``--time-budget`` this network's speeds (``config.resolve``'s ``choose``)."""
    speed = None
    if hp.network == Network.AUTO:
        chosen, speed = choice.choose_network(hp, recorded, cpu, given)
        hp = hp.replace(**chosen)
    hp = probes.measure_this_machine(probes.resolve_precision(hp, cpu), recorded, cpu, speed)
    if hp.optimizer == Optimizer.AUTO:
        hp = choice.choose_optimizer(hp, recorded, given)
    for line in choice_lines(hp):
        logs.info(line)
    return hp


def resolve(args, environ=None, gpus_visible=None, given=frozenset()):
    """``config.resolve`` with the budget's choices."""
    return config.resolve(args, environ, gpus_visible, given, choose=choose)


def parse(argv=None, parser=None, environ=None):
    """``config.parse`` with the budget's choices."""
    return config.parse(argv, parser, environ, choose=choose)


def choice_lines(hp) -> list:
    """What ``--precision auto`` went by (its timings, or why nothing was timed), ``--network auto``'s choice
    (hparams.json's ``network_choice``) and ``--optimizer auto``'s (``optimizer_choice``), one line a decision."""

    def kept(made):
        return " (kept from the job's first run)" if made.get("kept_from_the_first_run") else ""

    lines = []
    if hp.precision_probe is not None:
        timed = ", ".join("%s %.0f" % kv for kv in sorted(hp.precision_probe.items()))
        why = "%s img/s" % timed if timed else probes.untimed_reason(hp)
        lines.append("--precision auto: %s (%s)" % (hp.precision, why))
    made = hp.network_choice
    if made:
        candidates = "; ".join(
            "%(member)s %(images_per_sec).0f img/s (%(speed)s), %(epochs).1f epochs, " % c
            + ("expected %.2f%%" % (100 * c["expected_accuracy"]) if c["expected_accuracy"] else "not in the table")
            + (" with muon" if c.get("optimizer") == Optimizer.MUON else "")
            for c in made.get("candidates", [])
        )
        lines.append("--network auto: %s%s; %s: %s" % (made["member"], kept(made), made.get("why", ""), candidates))
    made = hp.optimizer_choice
    if made:
        epochs = "no speed measured" if made["epochs"] is None else "%.1f epochs in the budget" % made["epochs"]
        below, rate = made["muon_below_epochs"], made.get("muon_learning_rate")
        at = " at rate %g" % rate if rate else ""
        lines.append(
            "--optimizer auto: %s%s%s (%s; muon below %g)" % (made["optimizer"], at, kept(made), epochs, below)
        )
    return lines


class BudgetedJob(Guest):
    """``--time-budget`` as the job's guest: the planner, continued from the job's earlier runs (JOB_DIR/budget.json),
    and what runs it beside training and after it."""

    def __init__(self, hp):
        self.hp, self.dropped = hp, []
        state = planner_lib.BudgetState.load(hp.job_dir, hp.time_budget)
        if state.used_secs:
            logs.info(
                "time budget: %s of %s used by earlier runs of this job; continuing at progress %.3f",
                durations.format_clock(state.used_secs),
                durations.format_clock(hp.time_budget),
                state.progress,
            )
        guess = (hp.precision_probe or {}).get(hp.precision) or planner_lib.GUESS_IMAGES_PER_SEC
        speedup = planner_lib.planned_eval_speedup(hp.speed_probe)
        speed, probe_rate = hp.speed_probe, None
        if speed:
            guess = speed["train"]
            if speed.get("how") == family.TIMED:
                probe_rate = speed["train"]  # one tower's batches: towers on the CPU share its cores
            logs.info(
                "time budget: train %.0f, eval %.0f img/s (%s); planning evaluation at %.1fx training's speed"
                % (speed["train"], speed["eval"], speed.get("how", family.TIMED), speedup)
            )
        always, views = hp.evaluation_images()
        self.planner = planner_lib.Planner(
            hp.time_budget,
            processes.started_at(),
            state,
            hp.global_batch_size,
            always,
            guess_images_per_sec=guess,
            eval_speedup=speedup,
            step_cost=hp.image_sizes,
            optional_views=tuple(views),
            probe_images_per_sec=probe_rate,
        )

    def train_hooks(self) -> list:
        """The progress line (its total the current plan, its end the budget left) and the hook that stops
        training when the plan is done."""
        planner = self.planner
        progress = training_hooks.ProgressHook(
            lambda: planner.plan.total_steps if planner.plan else 0,
            self.hp.train_batch_size,
            every_n_steps=self.hp.log_every_n_steps,
            budget_left=lambda: planner.deadline - planner.clock(),
        )
        return [progress, budget_hooks.BudgetHook(planner, self.hp.job_dir, logs.info)]

    def saving_listeners(self) -> list:
        return [budget_hooks.CheckpointTimer(self.planner)]

    def before_training(self, estimator) -> bool:
        """False (and says so) on a restart after the budget was spent: the job evaluates and exports what it has."""
        planner = self.planner
        planner.setup_started = planner.clock()
        if not (estimator.latest_checkpoint() and planner.exhausted()):
            return True
        logs.info(
            "time budget: nothing left to train (progress %.3f, %s left); evaluating step %s",
            planner.state.progress,
            durations.format_clock(planner.deadline - planner.clock()),
            planner.state.step,
        )
        return False

    def before_test(self, hp, estimator):
        """``hp`` with only the optional test views that still fit the time left (the plan kept time for them)."""
        kept, self.dropped = self.planner.views_that_fit(self.planner.clock())
        if self.dropped:
            logs.info(
                "time budget: test evaluation without the %s view(s): they do not fit", " and ".join(self.dropped)
            )
        return hp.with_test_views(kept)

    def results(self, results: dict, test_eval_secs: tuple) -> dict:
        """results.json's record of the run's time: the plan, and what the end took against its reserve, and of
        that the test evaluation (``test_eval_secs``: ``(its set-up: the graph built and the checkpoint
        restored, the whole evaluation: the set-up and every view)``)."""
        planner = self.planner
        record = dict(
            time_budget_secs=self.hp.time_budget,
            planned_steps=planner.state.planned_steps,
            replans=planner.state.replans,
            budget_used_by_earlier_runs_secs=round(planner.earlier_secs, 2),
            stopped_at_the_deadline=planner.stopped_early,
            evaluation_speedup=round(planner.eval_speedup, 2),
        )
        if self.dropped:
            record["final_views_dropped"] = self.dropped
        if planner.training_ended is not None:
            ended, reserved = planner.training_ended
            secs = dict(final_secs_reserved=reserved, final_secs=time.monotonic() - ended)
            secs.update(final_test_eval_setup_secs=test_eval_secs[0], final_test_eval_secs=test_eval_secs[1])
            secs.update(training_setup_secs=planner.setup_secs, checkpoint_save_secs=planner.checkpoint_secs)
            record.update((k, round(v, 2)) for k, v in secs.items() if v is not None)
        return record
