"""``--time-budget``: plan the number of training steps from measured speed, and re-plan as it drifts.

The whole command, from start-up to ``results.json`` (final evaluations,
exports and pictures included), should end within the budget and use it. A
fixed number of epochs cannot do that on machines of different speed, and
stopping at a time with the schedule cut short wastes the end of the run:
Li, Yumer & Ramanan (ICLR 2020, "Budgeted Training") show that a schedule
that decays to zero at the end of the budget beats a truncated one, most at
small budgets. Ultralytics' trainer re-plans its epochs from measured speed
the same way.

How it works:

* ``Planner`` (pure Python, a clock passed in, so tests drive it with a
  simulated one) measures training steps/s after a warm-up, reserves time for
  what follows training (evaluations at an estimated forward-pass rate, plus
  fixed costs) and plans the total number of steps. It re-plans every
  ``replan_secs`` when the plan would move by more than ``REPLAN_TOLERANCE`` of
  the steps left: shared machines drift, and another process may take a core
  mid-run. If the deadline for training arrives anyway, it stops training at
  once.
* The learning rate is a function of the *fraction of the plan done*
  (``progress``), not of the step: a re-plan at step ``s`` with progress
  ``p_s`` continues linearly from ``p_s`` to 1 at the new last step, so the
  rate stays continuous and still reaches zero at the end of the budget.
  ``schedules.progress_tensor`` builds that in the graph from three local variables
  that ``BudgetHook`` assigns.
* ``JOB_DIR/budget.json`` records the budget, the time used, the progress and
  the re-plans. A job restarted on its job dir continues with what remains of
  its budget (the time of every earlier run counts) from the progress it had
  reached.
* A distributed (TF_CONFIG) job is refused: there the chief would have to
  plan for workers it does not time. Give a cluster ``--train-steps``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field

from estimator.common import storage

BUDGET_FILE = "budget.json"

# The figures behind these constants, with command, CPU and date: docs/speed.md, "What the budget's constants
# rest on".
# Steps left out of the speed measurement: graph optimisation and the input pipeline filling (2-5x slower).
WARMUP_STEPS = 10
# The first measurement comes 5 s after warm-up, or once the plan from the guessed speed has gone this share
# further: a schedule by progress spends a guess too slow too fast.
FIRST_MEASURE_SHARE = 0.1
# Evaluation's images/s over training's where it is not timed (a budget too short for probes, a GPU): below every
# ratio measured on a CPU.
EVAL_SPEEDUP = 3.0
# Plan with this share of the timed ratio: a margin for the probe's few batches.
MEASURED_EVAL_SPEEDUP_SHARE = 0.9
# What the end costs besides evaluating images (graphs built, checkpoints restored, the final export, pictures,
# the exit), and this many times a checkpoint's save in this run on top (the end's writes, slow on gs://).
FINAL_FIXED_SECS = 4.7
CHECKPOINT_WRITES_AT_END = 3.0
# The promise: the whole command ends within its budget plus the larger of these, and uses at least
# BUDGET_USED_AT_LEAST of it (``benchmarks.contention`` judges its runs by ``within_promise``).
BUDGET_TOLERANCE_SECS = 2.0
BUDGET_TOLERANCE_SHARE = 0.01
BUDGET_USED_AT_LEAST = 0.9
# The training speed assumed before any is measured: it only shapes the warm-up of the first ~10 s.
GUESS_IMAGES_PER_SEC = 500.0
# Re-plan at most this often, and only when the plan would move by more than this share of the steps left.
REPLAN_SECS = 15.0
REPLAN_TOLERANCE = 0.01
# The share of the budget the end may take with its optional test-time views: TTA never starves training.
FINAL_SHARE = 0.15
# A planned view still runs when the end is this much (or a training step) short of its planned time.
END_TOLERANCE_SECS = 1.0
# The end's reserve follows training's speed: the median of the last END_SPEED_INTERVALS intervals at the
# current image size, never below the best measured over BURST_FACTOR (a burst at start-up is no core taken).
BURST_FACTOR = 3.0
END_SPEED_INTERVALS = 3
# What passes before training's first step of a first run (interpreter, probes, training graph), at most.
STARTUP_SECS = 15.0


def within_promise(budget_secs: float, wall_secs: float) -> bool:
    """Whether a budgeted command that took ``wall_secs`` kept the promise: ended within its budget plus the
    larger of ``BUDGET_TOLERANCE_SECS`` and ``BUDGET_TOLERANCE_SHARE`` of it, and used at least
    ``BUDGET_USED_AT_LEAST`` of it."""
    tolerance = max(BUDGET_TOLERANCE_SECS, BUDGET_TOLERANCE_SHARE * budget_secs)
    return BUDGET_USED_AT_LEAST * budget_secs <= wall_secs <= budget_secs + tolerance


@dataclass(frozen=True)
class Plan:
    """Progress runs linearly from ``anchor_progress`` at ``anchor_step`` to 1 at ``total_steps``."""

    anchor_step: int
    anchor_progress: float
    total_steps: int

    def progress(self, step: float) -> float:
        """The fraction of the plan done at ``step`` (0..1)."""
        span = max(1.0, self.total_steps - self.anchor_step)
        done = min(1.0, max(0.0, (step - self.anchor_step) / span))
        return self.anchor_progress + (1.0 - self.anchor_progress) * done


@dataclass
class BudgetState:
    """What ``budget.json`` holds (and a restarted job reads back)."""

    budget_secs: float
    used_secs: float = 0.0  # wall time of earlier runs of this job
    step: int = 0
    progress: float = 0.0
    planned_steps: int = None  # the first plan of the job
    replans: list = field(default_factory=list)  # {"step", "steps_per_sec", "planned_steps"}

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, job_dir: str, budget_secs: float) -> BudgetState:
        """What earlier runs of the job in ``job_dir`` recorded (``BUDGET_FILE``), under this run's budget;
        a fresh state for a new job."""
        path = storage.join(job_dir, BUDGET_FILE)
        values = json.loads(storage.read_text(path)) if storage.exists(path) else {}
        return cls(**dict({k: values[k] for k in cls.__dataclass_fields__ if k in values}, budget_secs=budget_secs))


@dataclass
class Planner:
    """Plans and re-plans the steps of one process's share of the budget.

    Fields:
      budget_secs: the whole job's budget.
      start: the clock's value when this process started.
      state: what earlier runs of the job used (``BudgetState``); a fresh one for a new job.
      images_per_step: training images behind one step.
      final_images: images the evaluations after training will see (views counted).
      clock: ``time.monotonic`` or a simulated clock.
      guess_images_per_sec: the speed assumed before any is measured (the first steps only).
      eval_speedup: evaluation images/s over training images/s on this machine
        (``HParams.speed_probe``, measured); ``EVAL_SPEEDUP`` where not measured.
      final_fixed_secs: what the end costs besides evaluating images, at least.
      optional_views: ``[(name, images)]``, in order: test-time views evaluated after training only while
        the end stays within ``FINAL_SHARE`` of the budget (``planned_views``), and at the end only those
        that still fit the time left (``views_that_fit``); ``final_images`` are always evaluated.
      step_cost: where steps differ in cost as training goes on (``--progressive-resize``), an object
        with ``mean_cost(start, end)``, ``size_at(progress)`` and ``full`` (``schedules.ImageSizes``): a
        step's time follows its pixels (docs/speed.md), so a measured speed is converted to full-size steps
        and plans spend the time left on the mix of sizes still to come. None: every step costs the same.
      probe_images_per_sec: training images/s the start-up probe timed for this network
        (``HParams.speed_probe``), where it did: the end's reserve never assumes training
        slower than a third of it (``BURST_FACTOR``), so a burst of another process as the job starts
        cannot make the reserve swallow the budget.
    """

    budget_secs: float
    start: float
    state: BudgetState
    images_per_step: int
    final_images: int
    clock: object = time.monotonic
    guess_images_per_sec: float = GUESS_IMAGES_PER_SEC
    replan_secs: float = REPLAN_SECS
    final_fixed_secs: float = FINAL_FIXED_SECS
    eval_speedup: float = EVAL_SPEEDUP
    step_cost: object = None
    optional_views: tuple = ()
    probe_images_per_sec: float = None

    def __post_init__(self):
        self.earlier_secs = self.state.used_secs  # what earlier runs of the job used
        self.deadline = self.start + self.budget_secs - self.state.used_secs
        self.steps_per_sec = self.guess_images_per_sec / self.images_per_step  # as measured
        self.full_size_steps_per_sec = self.steps_per_sec  # the same, converted to full-size steps
        self.measured = False
        self.plan = None
        self._mark = None  # (time, step) where the current speed measurement began
        self._last_check = None
        self.stopped_early = False
        self.training_ended = None  # (clock, seconds reserved for the end) when training ended
        self.setup_started = None  # when building the training graph began: ``begin`` measures the set-up
        self.setup_secs = None  # from then until the first step could run
        self.recent_speeds = []  # (image sizes, full-size steps/s) of the last END_SPEED_INTERVALS intervals
        # What the last checkpoint took to save: the end keeps time to write as much again
        # (``CHECKPOINT_WRITES_AT_END``), wherever the job dir is.
        self.checkpoint_secs = 0.0
        # The best full-size speed measured: the start-up probe's (timed on full-size images, the median
        # run, cached from a quiet moment) until training measures better.
        self.best_full_size_steps_per_sec = (self.probe_images_per_sec or 0.0) / self.images_per_step

    # -- arithmetic ------------------------------------------------------------------------------

    def _mean_secs(self, start: float, end: float = 1.0) -> float:
        """The mean seconds per step from progress ``start`` to ``end``."""
        cost = 1.0 if self.step_cost is None else self.step_cost.mean_cost(start, end)
        return cost / self.full_size_steps_per_sec

    def _eval_secs(self, images: float) -> float:
        """Seconds to evaluate ``images`` at the current speed (evaluation sees full-size images): the
        median of the last intervals' at the current image size (``END_SPEED_INTERVALS``)."""
        full_steps_per_sec = self.full_size_steps_per_sec
        if self.recent_speeds:
            sides = self.recent_speeds[-1][0]
            full_steps_per_sec = statistics.median(speed for s, speed in self.recent_speeds if s == sides)
        # At most BURST_FACTOR times slower than the best speed measured: a burst at start-up must not make the
        # reserve swallow the budget, while a core taken for good is still followed (docs/speed.md).
        full_steps_per_sec = max(full_steps_per_sec, self.best_full_size_steps_per_sec / BURST_FACTOR)
        eval_rate = self.eval_speedup * full_steps_per_sec * self.images_per_step
        return images / max(eval_rate, 1e-9)

    def fixed_secs(self) -> float:
        """What the end costs besides evaluating images: the fixed reserve and the writes of the job dir."""
        return self.final_fixed_secs + CHECKPOINT_WRITES_AT_END * self.checkpoint_secs

    def _views_within(self, limit: float, views) -> tuple:
        """``(the longest prefix of views whose end takes at most limit seconds, the seconds that end takes)``: the
        fixed costs, the images always evaluated and the views'."""
        kept, secs = [], self.fixed_secs() + self._eval_secs(self.final_images)
        for name, images in views:
            cost = self._eval_secs(images)
            if secs + cost > limit:
                break
            kept.append(name)
            secs += cost
        return kept, secs

    def planned_views(self) -> list:
        """The optional views the plan keeps time for: those within ``FINAL_SHARE`` of the budget."""
        return self._views_within(FINAL_SHARE * self.budget_secs, self.optional_views)[0]

    def views_that_fit(self, now: float):
        """``(kept, dropped)`` names of the planned views, at the end: those that still fit the time left
        (training may have ended late, or the machine slowed down), and the rest of the optional ones."""
        planned = self.planned_views()
        # Training ends with the step that crosses its deadline, up to a step into the reserve: that alone
        # must not drop a view the plan kept time for (the evaluation's own margin is as long).
        limit = self.deadline - now + max(END_TOLERANCE_SECS, 1.0 / self.steps_per_sec)
        if self.training_ended is not None:
            # What of the end's fixed costs was paid since training ended (its last checkpoint, the final
            # export) is not counted again.
            limit += min(max(0.0, now - self.training_ended[0]), self.fixed_secs())
        kept = self._views_within(limit, self.optional_views[: len(planned)])[0]  # planned: a prefix of them
        return kept, [name for name, _ in self.optional_views if name not in kept]

    def final_secs(self) -> float:
        """Time to keep for after training, at the current speed: the fixed costs, the images always
        evaluated and the planned views."""
        return self._views_within(FINAL_SHARE * self.budget_secs, self.optional_views)[1]

    def training_deadline(self) -> float:
        return self.deadline - self.final_secs()

    def steps_that_fit(self, step: int, now: float) -> int:
        """The last step training can reach by the training deadline at the current speed."""
        left = max(0.0, self.training_deadline() - now)
        # The rest of any plan runs from this progress to 1: its steps' mean time is the same whatever
        # their number.
        progress = self.plan.progress(step) if self.plan else self.state.progress
        return int(step + math.floor(left / self._mean_secs(progress, 1.0)))

    # -- the run ---------------------------------------------------------------------------------

    def begin(self, step: int) -> Plan:
        """The provisional plan from the guessed speed, continuing the progress of an earlier run."""
        now = self.clock()
        if self.setup_started is not None:
            self.setup_secs = now - self.setup_started
        self._mark = None
        self._last_check = now
        total = max(step + 1, self.steps_that_fit(step, now))
        self.plan = Plan(step, self.state.progress, total)
        return self.plan

    def after_step(self, step: int) -> Plan:
        """Called with the global step reached after each training step; returns a new plan when
        it re-plans, else None. ``should_stop`` says when to end training."""
        now = self.clock()
        if self._mark is None:
            if step - self.plan.anchor_step >= WARMUP_STEPS:
                self._mark = (now, step)
            return None
        then, before = self._mark
        if now - then <= 0 or step <= before:
            return None
        measured = (step - before) / (now - then)
        if not self.measured:
            spent = self.plan.progress(step) - self.plan.progress(before)
            if now - then < min(5.0, self.replan_secs) and spent < FIRST_MEASURE_SHARE:
                return None
        elif now - self._last_check < self.replan_secs:
            return None
        # From the second on, the speed of the last interval: what the machine gives now (another process may
        # have taken a core), not the average since the start.
        first, self.measured = not self.measured, True
        self._set_speed(measured, before, step)
        self._mark = (now, step)
        return self._replan(step, now, first)

    def _set_speed(self, measured: float, before: int, step: int) -> None:
        """``measured`` steps/s from step ``before`` to ``step``; as full-size steps, at their mean cost."""
        self.steps_per_sec = measured
        cost, sides = 1.0, None  # sides: the image sizes the interval began and ended at (None: one throughout)
        if self.step_cost is not None:
            start, end = self.plan.progress(before), self.plan.progress(step)
            cost = self.step_cost.mean_cost(start, end)
            sides = (self.step_cost.size_at(start), self.step_cost.size_at(end))
        self.full_size_steps_per_sec = measured * cost
        self.recent_speeds = (self.recent_speeds + [(sides, self.full_size_steps_per_sec)])[-END_SPEED_INTERVALS:]
        # The end's floor rises only with a speed measured at full size, never with one converted from smaller
        # images, which can run ahead of what full-size steps get.
        if sides is None or sides == (self.step_cost.full,) * 2:
            self.best_full_size_steps_per_sec = max(self.best_full_size_steps_per_sec, self.full_size_steps_per_sec)

    def _replan(self, step: int, now: float, first: bool = False):
        self._last_check = now
        total = max(step + 1, self.steps_that_fit(step, now))
        if not first and abs(total - self.plan.total_steps) <= REPLAN_TOLERANCE * (self.plan.total_steps - step):
            return None
        self.plan = Plan(step, self.plan.progress(step), total)
        if self.state.planned_steps is None:
            self.state.planned_steps = total
        replan = {"step": int(step), "steps_per_sec": round(self.steps_per_sec, 4), "planned_steps": int(total)}
        if self.step_cost is not None:
            replan["full_size_steps_per_sec"] = round(self.full_size_steps_per_sec, 4)
        self.state.replans.append(replan)
        return self.plan

    def exhausted(self) -> bool:
        """Nothing left to train: an earlier run finished the plan, or no time is left for training."""
        return self.state.progress >= 1.0 - 1e-6 or self.clock() >= self.training_deadline()

    def should_stop(self, step: int) -> bool:
        """True once the plan is done, or when the training deadline has come anyway."""
        if step < self.plan.total_steps and self.clock() >= self.training_deadline():
            self.stopped_early = True
        return step >= self.plan.total_steps or self.stopped_early

    def end_training(self) -> None:
        """Notes when training ended and what the planner had kept for what follows (results.json
        compares it with what that took)."""
        self.training_ended = (self.clock(), self.final_secs())

    def record(self, step: int) -> BudgetState:
        """The state to save: time used so far (earlier runs and this one), step and progress."""
        self.state.step = int(step)
        self.state.progress = self.plan.progress(step) if self.plan else self.state.progress
        self.state.used_secs = round(self.earlier_secs + (self.clock() - self.start), 3)
        return self.state


def planned_eval_speedup(speed) -> float:
    """Evaluation images/s over training's, as the plan takes it: ``speed``'s ratio (``HParams.speed_probe``:
    ``{"train", "eval"}`` images/s, timed or estimated) with ``MEASURED_EVAL_SPEEDUP_SHARE``'s margin, else
    ``EVAL_SPEEDUP`` (None: nothing was measured)."""
    return MEASURED_EVAL_SPEEDUP_SHARE * speed["eval"] / speed["train"] if speed else EVAL_SPEEDUP


def training_secs(budget_secs: float, images_per_sec: float, final_images: int, optional_views=(), *, eval_speedup):
    """Seconds of training ``budget_secs`` leaves a network that trains ``images_per_sec`` full-size images:
    the budget less ``STARTUP_SECS`` and the end's reserve as ``Planner`` keeps it at that speed (the
    images always evaluated, the optional views that fit ``FINAL_SHARE``, the fixed costs), evaluation
    running ``eval_speedup`` times training's images/s (``planned_eval_speedup``). What
    ``--network auto`` counts each member's epochs in: a slower member's end takes longer (85% of the
    budget less 15 s, the estimate this replaced, put a 30-minute run at 1,515 s of training; it trained
    1,756)."""
    planner = Planner(
        budget_secs,
        0.0,
        BudgetState(budget_secs),
        1,
        final_images,
        guess_images_per_sec=images_per_sec,
        eval_speedup=eval_speedup,
        optional_views=tuple(optional_views),
    )
    return max(0.0, budget_secs - STARTUP_SECS - planner.final_secs())
