"""--time-budget: durations, the planner on a simulated clock, the schedule across re-plans, real runs."""

import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from estimator.budget import planner as time_budget
from estimator.budget.planner import BudgetState, Plan, Planner
from estimator.common import durations, machine
from estimator.training import schedules
from tests.helpers import run_main

v1 = tf.compat.v1


@pytest.mark.parametrize(
    "text,seconds",
    [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1h2m3s", 3723), ("300", 300), ("12.5", 12.5), ("0.5h", 1800)],
)
def test_durations(text, seconds):
    assert durations.parse(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "0", "-5", "5x", "inf", "nan", "m", "5m3h"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError, match="is not a positive duration: use e.g. 90s, 5m, 1h30m"):
        durations.parse(text)


class Clock:
    """A simulated clock: the test moves it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def planner(
    clock, budget=100.0, used=0.0, progress=0.0, final_images=0, fixed=10.0, guess=500.0, speedup=4.0, views=()
):
    state = BudgetState(budget, used_secs=used, progress=progress)
    return Planner(
        budget,
        0.0,
        state,
        images_per_step=100,
        final_images=final_images,
        clock=clock,
        guess_images_per_sec=guess,
        replan_secs=15.0,
        final_fixed_secs=fixed,
        eval_speedup=speedup,
        optional_views=tuple(views),
    )


def run_steps(p, clock, first, last, steps_per_sec, plans):
    """Steps ``first``..``last`` at a steady speed; collects the plans made."""
    for step in range(first, last + 1):
        clock.now += 1.0 / steps_per_sec
        before = p.plan
        plan = p.after_step(step)
        if plan is not None:
            plans.append((step, plan, clock.now, before))
        if p.should_stop(step):
            return step
    return last


def test_the_first_plan_comes_from_measured_speed_after_warm_up():
    clock = Clock()
    p = planner(clock)
    # Before measuring: the guess, 500 images/s = 5 steps/s, until the training deadline 100 - 10 s.
    assert p.begin(0) == Plan(0, 0.0, 450)
    plans = []
    run_steps(p, clock, 1, 70, 8.0, plans)
    # Warm-up is steps 1-10 (mark at step 10, t = 1.25 s); 5 s later (step 50, t = 6.25 s) the speed
    # is 8 steps/s: 50 + 8 x (90 - 6.25) = 720 steps, progress going on from 50/450.
    step, plan, _, _ = plans[0]
    assert step == 50 and plan.total_steps == 720 and plan.anchor_progress == pytest.approx(50 / 450)
    assert p.state.planned_steps == 720
    assert p.state.replans == [{"step": 50, "steps_per_sec": 8.0, "planned_steps": 720}]


def test_a_plan_from_a_guess_too_slow_is_measured_before_it_spends_the_schedule():
    """A short budget plans from the slowest CPU's speed (no probe fits it): on a machine 8 times as fast its
    schedule, which runs by progress, would be spent in an eighth of the time. The speed is measured once the
    plan has gone ``FIRST_MEASURE_SHARE`` further than warm-up, before 5 s have passed."""
    clock = Clock()
    p = planner(clock, budget=30.0, fixed=5.0)
    assert p.begin(0) == Plan(0, 0.0, 125)  # the guess: 5 steps/s until the training deadline, 25 s
    plans = []
    last = run_steps(p, clock, 1, 100000, 40.0, plans)
    # Warm-up is steps 1-10 (mark at t = 0.25 s); 12.5 steps later (step 23, t = 0.575 s) the plan is 10.4%
    # further: at 40 steps/s, 23 + floor(40 x (25 - 0.575)) steps (977 a hair under in floating point),
    # progress going on from 23/125.
    step, plan, at, _ = plans[0]
    assert step == 23 and at == pytest.approx(0.575) and plan.total_steps == 999
    assert plan.anchor_progress == pytest.approx(23 / 125)
    assert last == plan.total_steps == 999 and clock.now == pytest.approx(999 / 40)  # the deadline, to a step
    # A guess that was right: measured at the same step, the plan kept.
    clock = Clock()
    p = planner(clock, budget=30.0, fixed=5.0)
    p.begin(0)
    plans = []
    run_steps(p, clock, 1, 100000, 5.0, plans)
    step, plan, at, _ = plans[0]
    assert step == 23 and at == pytest.approx(4.6) and plan.total_steps == 124  # 23 + floor(5 x 20.39999...)


def test_a_slower_machine_re_plans_and_progress_stays_continuous():
    clock = Clock()
    p = planner(clock)
    p.begin(0)
    plans = []
    run_steps(p, clock, 1, 200, 8.0, plans)
    first = p.plan
    # Another process takes a core: half the speed. The next check (15 s after the last) re-plans.
    run_steps(p, clock, 201, 400, 4.0, plans)
    step, second, at, before = plans[-1]
    assert second.total_steps < first.total_steps and p.steps_per_sec == pytest.approx(4.0)
    for replan_step, new, _, old in plans:
        assert old.progress(replan_step) == pytest.approx(new.progress(replan_step))  # no jump at a re-plan
    assert second.progress(second.total_steps) == 1.0
    # The new plan ends at the training deadline (100 - 10 s) at the new speed.
    assert second.total_steps == step + math.floor((90 - at) * p.steps_per_sec)


def test_re_plans_end_training_at_the_deadline_and_use_the_budget():
    clock = Clock()
    p = planner(clock, budget=300.0, fixed=10.0)
    p.begin(0)
    plans = []
    last = run_steps(p, clock, 1, 100000, 8.0, plans)
    # Training ends at its plan, within a step of the training deadline (300 - 10 s).
    assert last == p.plan.total_steps and not p.stopped_early
    assert 290 - 1 / 8.0 - 0.5 <= clock.now <= 290


def test_a_small_late_drift_is_still_re_planned_so_training_ends_at_its_deadline():
    clock = Clock()
    p = planner(clock, budget=1000.0, fixed=10.0)
    p.begin(0)
    plans = []
    run_steps(p, clock, 1, 4800, 8.0, plans)  # 600 s
    planned = p.plan.total_steps
    # 0.9% faster from here on: 27 steps (3.4 s) more fit, within 1% of the 7,920-step plan, and beyond
    # 1% of the steps left once fewer than 2,700 are: training re-plans and ends at its deadline (990 s).
    last = run_steps(p, clock, 4801, 100000, 8.07, plans)
    assert planned == 7920 and last == p.plan.total_steps > planned + 20 and not p.stopped_early
    assert 990 - 1 / 8.07 - 0.5 <= clock.now <= 990


def run_resized(step_cost, full_steps_per_sec=4.0, budget=300.0, exponent=2.0, start=24, slow_from=None):
    """A simulated run of ``--progressive-resize 24``: each step takes the time of its size (at the
    progress of the plan the graph holds) at ``full_steps_per_sec`` full-size steps/s, a step's time
    growing as its side to the power ``exponent`` (2: as its pixels); from ``slow_from`` seconds on,
    every step takes twice as long (another process takes a core)."""
    sizes = schedules.ImageSizes(start, 0.5, 32)
    clock = Clock()
    p = planner(clock, budget=budget, fixed=10.0)
    p.step_cost = step_cost
    p.begin(0)
    step = 0
    while True:
        side = sizes.size_at(p.plan.progress(step))
        slow = 2.0 if slow_from is not None and clock.now >= slow_from else 1.0
        clock.now += slow * (side / 32) ** exponent / full_steps_per_sec
        step += 1
        p.after_step(step)
        if p.should_stop(step):
            return p, step, clock.now


def test_a_plan_with_progressive_resizing_counts_the_cheaper_small_steps():
    sizes = schedules.ImageSizes(24, 0.5, 32)
    p, last, now = run_resized(sizes)
    first = p.state.replans[0]
    # Measured at 24 pixels: 4 / 0.5625 steps/s, 4 as full-size steps; the plan spends the time
    # left on the mix still to come (a quarter at 24, a quarter at 28, half at 32 pixels).
    assert first["steps_per_sec"] == pytest.approx(4.0 / 0.5625, rel=1e-3)
    assert first["full_size_steps_per_sec"] == pytest.approx(4.0, rel=1e-3)
    # Before any is measured, the guess (5 steps/s) is taken as full-size speed too.
    provisional = math.floor(290 * 5 / sizes.mean_cost(0.0))
    assert provisional == 1742
    # Steps 1-10 are warm-up; the speed is taken from step 10 to 5 s later (step 46, all at 24 pixels);
    # then the time left to the training deadline (290 s) buys steps at the mean cost of the rest.
    step, at = first["step"], first["step"] * 0.5625 / 4.0
    assert step == 46
    rest = sizes.mean_cost(Plan(0, 0.0, provisional).progress(step))
    assert first["planned_steps"] == pytest.approx(step + (290 - at) * 4.0 / rest, abs=1)
    # The cost model is the machine's: no re-plan moves the plan by more than 1%, and training
    # ends at its plan at the training deadline, using the budget.
    assert len(p.state.replans) == 1 and last == p.plan.total_steps and not p.stopped_early
    assert 290 - 0.25 <= now <= 290
    assert p.full_size_steps_per_sec == pytest.approx(4.0, rel=1e-3)


def test_a_cpu_where_small_steps_cost_more_than_their_pixels_is_followed_by_re_plans():
    """Where a step's time grows as its side^1.2 (not as its pixels, which the plan assumes), the speed
    converted from 20-pixel steps is too slow for the larger ones: re-plans follow as they come, and
    training still ends at its plan by the deadline."""
    sizes = schedules.ImageSizes(20, 0.5, 32)
    p, last, now = run_resized(sizes, exponent=1.2, start=20)
    first, final = p.state.replans[0], p.state.replans[-1]
    assert first["full_size_steps_per_sec"] == pytest.approx(4.0 / 0.625**1.2 * 0.625**2, rel=1e-3)
    assert len(p.state.replans) > 2 and final["planned_steps"] > first["planned_steps"]
    assert p.full_size_steps_per_sec == pytest.approx(4.0, rel=1e-3)
    assert last == p.plan.total_steps and not p.stopped_early and 290 - 1.0 <= now <= 290


def test_speeds_follow_a_machine_that_slows_down_at_any_size():
    """Another process takes a core at 60 s: the speed measured next is twice as slow, the plan follows and
    training still ends by the deadline."""
    sizes = schedules.ImageSizes(24, 0.5, 32)
    p, last, now = run_resized(sizes, slow_from=60.0)
    assert p.full_size_steps_per_sec == pytest.approx(4.0 / 2, rel=1e-2)
    assert now <= 290 and last == p.plan.total_steps


def test_a_plan_blind_to_progressive_resizing_over_plans_and_re_plans():
    p, last, now = run_resized(None)
    # Speed measured at 24 pixels taken for every step: the first plan is 1 / 0.832 too long, and
    # later re-plans cut it as the larger, slower steps come.
    assert p.state.replans[0]["planned_steps"] > 1.15 * last and len(p.state.replans) > 2
    assert "full_size_steps_per_sec" not in p.state.replans[0]


def test_the_hard_stop_ends_training_when_time_is_up_anyway():
    clock = Clock()
    p = planner(clock, budget=100.0)
    p.begin(0)
    plans = []
    run_steps(p, clock, 1, 300, 8.0, plans)
    clock.now += 60  # the machine stalls for a minute, past the training deadline
    assert p.should_stop(301) and p.stopped_early


def test_evaluation_images_are_reserved_at_the_measured_speed():
    clock = Clock()
    p = planner(clock, budget=100.0, final_images=40000, fixed=10.0)
    p.begin(0)
    run_steps(p, clock, 1, 70, 8.0, [])
    # 8 steps/s x 100 images = 800 training images/s; evaluation at 4x: 40,000 images in 12.5 s.
    assert p.final_secs() == pytest.approx(10.0 + 12.5)
    assert p.training_deadline() == pytest.approx(77.5)
    # Where evaluation was measured at 6.25x training: 8 s for the images, and training goes on longer.
    fast = planner(clock, budget=100.0, final_images=40000, fixed=10.0, speedup=6.25)
    fast.begin(0)
    run_steps(fast, clock, 1, 70, 8.0, [])
    assert fast.final_secs() == pytest.approx(10.0 + 8.0) and fast.training_deadline() == pytest.approx(82.0)
    # The hook notes what it kept when training ends (results.json: final_secs_reserved).
    fast.end_training()
    assert fast.training_ended == (clock.now, pytest.approx(18.0))


def test_the_ends_reserve_keeps_three_times_what_a_checkpoint_took_to_save():
    """A job dir on gs:// saves slowly (seconds, against 0.06 s on a local disk), and the end writes the last
    checkpoint and the export: 3 times the last save more is kept,
    training's deadline moving as much earlier, and the views re-checked against it."""
    clock = Clock()
    p = planner(clock, budget=100.0, final_images=40000, fixed=10.0)
    p.begin(0)
    run_steps(p, clock, 1, 70, 8.0, [])
    assert time_budget.CHECKPOINT_WRITES_AT_END == 3.0 and p.checkpoint_secs == 0.0
    assert p.final_secs() == pytest.approx(10.0 + 12.5) and p.training_deadline() == pytest.approx(77.5)
    p.checkpoint_secs = 2.0
    assert p.fixed_secs() == pytest.approx(16.0) and p.final_secs() == pytest.approx(16.0 + 12.5)
    assert p.training_deadline() == pytest.approx(71.5)
    p.checkpoint_secs = 0.5  # the last save counts: a job dir that got faster gives the time back
    assert p.training_deadline() == pytest.approx(76.0)
    # A view that fits a local disk's end does not fit one that writes to slow storage.
    views = [("flip", 10000)]
    fast = planner(Clock(), budget=100.0, final_images=10000, fixed=5.5, views=views)
    fast.begin(0)
    run_steps(fast, fast.clock, 1, 70, 8.0, [])
    assert fast.planned_views() == ["flip"]  # 5.5 s and 3.125 s for each 10,000 images: 11.75 s of the 15 s share
    fast.checkpoint_secs = 2.65
    assert fast.planned_views() == []  # 7.95 s more: 19.7 s, past it


def test_the_training_a_budget_leaves_a_network_is_its_own_end_at_its_speed():
    """What ``--network auto`` counts a member's epochs in: 300 s less the start-up (15 s) and the end the
    planner would reserve at the member's speed. At 800 images/s, evaluation at 4x: 4.7 s fixed, 10,000
    plain images 3.125 s, flip 3.125 s, translations 12.5 s: 23.45 s, every view within 45 s. At 200: 17.2 s,
    flip 12.5 s more; the translations' 50 s pass the share and are not planned: 29.7 s."""
    views = [("flip", 10000), ("translations", 40000)]
    assert (time_budget.STARTUP_SECS, time_budget.FINAL_FIXED_SECS) == (15.0, 4.7)
    assert time_budget.training_secs(300.0, 800.0, 10000, views, eval_speedup=4.0) == pytest.approx(261.55)
    assert time_budget.training_secs(300.0, 200.0, 10000, views, eval_speedup=4.0) == pytest.approx(255.3)
    # Without views: the plain images and the fixed costs alone; a budget shorter than the start-up: none.
    assert time_budget.training_secs(300.0, 800.0, 10000, eval_speedup=4.0) == pytest.approx(277.175)
    assert time_budget.training_secs(10.0, 800.0, 10000, eval_speedup=4.0) == 0.0
    # The evaluation's ratio as the plan takes it: the measured one with a margin, else the device's guess.
    assert time_budget.planned_eval_speedup({"train": 500.0, "eval": 2000.0}) == pytest.approx(3.6)
    assert time_budget.planned_eval_speedup(None) == time_budget.planned_eval_speedup({}) == time_budget.EVAL_SPEEDUP
    assert time_budget.EVAL_SPEEDUP == 3.0


def test_tta_views_are_planned_within_the_ends_share_and_dropped_when_they_no_longer_fit():
    """A 300 s budget keeps at most 45 s (FINAL_SHARE) for the end with its optional views: at 800 training
    images/s and evaluation at 4x (3,200 images/s), 10,000 plain test images and 8 s fixed take 11.1 s;
    the flip view (10,000 more) 3.1 s; the translations (40,000) 12.5 s more: 26.8 s in all, kept. At a
    quarter of the speed they would take 8 + 12.5 + 12.5 + 50 = 83 s: only the flip view fits 45 s."""
    views = [("flip", 10000), ("translations", 40000)]
    clock = Clock()
    p = planner(clock, budget=300.0, final_images=10000, fixed=8.0, views=views)
    p.begin(0)
    run_steps(p, clock, 1, 100, 8.0, [])
    assert time_budget.FINAL_SHARE == 0.15
    assert p.planned_views() == ["flip", "translations"]
    assert p.final_secs() == pytest.approx(8.0 + 60000 / 3200)
    slow = planner(Clock(), budget=300.0, final_images=10000, fixed=8.0, views=views)
    slow.begin(0)
    run_steps(slow, slow.clock, 1, 100, 2.0, [])
    assert slow.planned_views() == ["flip"]
    assert slow.final_secs() == pytest.approx(8.0 + 20000 / 800)  # 33 s: the translations' 50 s not kept
    # At the end: the views that still fit the time left. Training ended late (a stall): 20 s are left,
    # where plain and flip take 33 s: plain alone, the flip view dropped with the translations.
    slow.clock.now = slow.deadline - 20.0
    assert slow.views_that_fit(slow.clock()) == ([], ["flip", "translations"])
    slow.clock.now = slow.deadline - 40.0
    assert slow.views_that_fit(slow.clock()) == (["flip"], ["translations"])
    # Training's last step ends a fraction of a second into the reserve: the planned views still run.
    slow.clock.now = slow.deadline - slow.final_secs() + 0.4
    assert slow.views_that_fit(slow.clock()) == (["flip"], ["translations"])
    # Never beyond the plan, however much time is left.
    slow.clock.now = slow.deadline - 200.0
    assert slow.views_that_fit(slow.clock()) == (["flip"], ["translations"])
    # Training ended on time and the final export took 5 s of the end's 8 fixed ones: those are not
    # counted again (28 s left hold the 25 s of plain and flip and the 3 fixed still to come); a 6 s stall
    # after the 8 fixed ones is.
    slow.clock.now = slow.deadline - slow.final_secs()
    slow.end_training()
    slow.clock.now += 5.0
    assert slow.views_that_fit(slow.clock()) == (["flip"], ["translations"])
    slow.clock.now += 9.0
    assert slow.views_that_fit(slow.clock()) == ([], ["flip", "translations"])
    # The plain evaluation alone past the share: no optional view is planned, the plain one still runs.
    tiny = planner(Clock(), budget=60.0, final_images=10000, fixed=8.0, views=views)
    tiny.begin(0)
    run_steps(tiny, tiny.clock, 1, 100, 2.0, [])
    assert tiny.planned_views() == [] and tiny.final_secs() == pytest.approx(8.0 + 12.5)


def test_the_step_that_crosses_trainings_deadline_does_not_drop_a_planned_view():
    """Training ends with the step that crosses its deadline: at 0.5 steps/s up to 2 s into the end's
    reserve (a 30-minute run held to AVX2 with a core taken, at 0.32 steps/s, ended 2.3 s late, dropped its
    translations and left 75 s of its budget unused). Within a step the planned views still run; beyond
    it, they are dropped as before."""
    views = [("flip", 10000), ("translations", 40000)]
    p = planner(Clock(), budget=1800.0, final_images=10000, fixed=8.0, speedup=40.0, views=views)
    p.begin(0)
    run_steps(p, p.clock, 1, 100, 0.5, [])
    assert p.planned_views() == ["flip", "translations"] and p.final_secs() == pytest.approx(8.0 + 30.0)
    p.clock.now = p.training_deadline() + 1.9
    assert p.views_that_fit(p.clock()) == (["flip", "translations"], [])
    p.clock.now = p.training_deadline() + 2.5
    assert p.views_that_fit(p.clock()) == (["flip"], ["translations"])


def test_one_slow_interval_does_not_move_the_ends_reserve_and_a_machine_slowed_for_good_does():
    """The end's reserve follows the median of the last three intervals' speeds: one interval 10% slower
    (a busy loop's noise; on a Xeon it moved a 30-minute run's reserve 3.4 s at its last step and dropped
    the translations for 0.5 s) leaves it as it was; a second one is the machine's new speed."""
    views = [("flip", 10000), ("translations", 40000)]
    p = planner(Clock(), budget=1800.0, final_images=10000, fixed=8.0, speedup=10.0, views=views)
    p.begin(0)
    # 1 step/s of 100 images, evaluation at 10x: 60,000 images in 60 s. Intervals end at steps 15, 30, ... 195.
    run_steps(p, p.clock, 1, 195, 1.0, [])
    assert time_budget.END_SPEED_INTERVALS == 3 and p.final_secs() == pytest.approx(8.0 + 60.0)
    run_steps(p, p.clock, 196, 209, 0.9, [])  # one interval (196-209) at 0.9 steps/s
    assert p.steps_per_sec == pytest.approx(0.9) and p.final_secs() == pytest.approx(8.0 + 60.0)
    run_steps(p, p.clock, 210, 223, 0.9, [])  # a second one: the median follows
    assert p.final_secs() == pytest.approx(8.0 + 60000 / 900)


def test_the_ends_reserve_counts_only_the_intervals_at_the_current_image_size():
    """--progressive-resize 28 until half the plan: two intervals at 28 pixels put the full-size speed, from the
    pixels' share, at 4 steps/s; an interval across the change converts at its mean cost; the first interval all at
    32 pixels measures 2 (a core taken as the size changed). The reserve follows the 2 measured at full size,
    not the median with the estimates."""
    p = planner(Clock(), budget=300.0, final_images=60000, fixed=8.0)
    p.step_cost = schedules.ImageSizes(28, 0.5, 32)
    p.plan = Plan(0, 0.0, 1000)  # steps 0-499 at 28 pixels, 500-999 at 32
    for before, step in ((100, 200), (200, 300)):
        p._set_speed(4.0 / (28 / 32) ** 2, before, step)
    assert p.full_size_steps_per_sec == pytest.approx(4.0) and p.final_secs() == pytest.approx(8.0 + 60000 / 1600)
    p._set_speed(3.0, 480, 520)  # across the change: half its steps at 28 pixels, half at 32
    assert p.full_size_steps_per_sec == pytest.approx(3.0 * ((28 / 32) ** 2 + 1) / 2)
    p._set_speed(2.0, 600, 640)
    assert [sides for sides, _ in p.recent_speeds] == [(28, 28), (28, 32), (32, 32)]
    assert p.final_secs() == pytest.approx(8.0 + 60000 / 800)


def test_the_test_evaluations_views_are_counted_once():
    from tests.helpers import hp

    both = hp(eval_flip_tta=True, eval_tta=True)
    assert both.with_test_views(["flip"]) == both.replace(eval_tta=False)
    assert both.with_test_views([]) == both.replace(eval_tta=False, eval_flip_tta=False)
    assert both.replace(eval_flip_tta=False).with_test_views(["flip", "translations"]).eval_flip_tta is False


def test_network_speed_times_training_and_evaluation_side_by_side_and_caches_them(tmp_path):
    from estimator.budget import probes as speed_probes
    from tests.helpers import hp

    cpu = {"model": "this CPU", "flags": set()}
    small = hp(train_batch_size=8, eval_batch_size=10)
    cache = str(tmp_path / "speed.json")
    probe = speed_probes.network_speed(small, cpu=cpu, cache_file=cache)
    assert set(probe) == {"train", "eval"} and all(v > 0 for v in probe.values())
    # Forward passes alone, with no gradient or update: faster per image than training.
    assert probe["eval"] > probe["train"]

    def no_timing(*_):
        raise AssertionError("a cached probe is not timed again")

    assert speed_probes.network_speed(small, cpu=cpu, timer=no_timing, cache_file=cache) == probe
    # Another precision or evaluation batch is another entry: timed again.
    for other in (small.replace(precision="bf16"), small.replace(eval_batch_size=20)):
        with pytest.raises(AssertionError, match="not timed again"):
            speed_probes.network_speed(other, cpu=cpu, timer=no_timing, cache_file=cache)


def test_a_probe_is_bounded_in_seconds_not_steps():
    class Session:
        runs = 0

        def run(self, fetch):
            self.runs += 1

    ticks = iter(range(1000))
    clock = lambda: 2.0 * next(ticks)  # noqa: E731 - every run takes 2 s on this clock (start, end: one tick)
    session = Session()
    # 3 s bound, 8 steps at most: two timed runs (4 s) after the warm-up one, not eight.
    assert machine.seconds_per_run(session, None, 8, 1, clock=clock, max_secs=3.0) == 2.0
    assert session.runs == 3
    session = Session()
    assert machine.seconds_per_run(session, None, 8, 1, clock=clock, max_secs=100.0) == 2.0
    assert session.runs == 9  # the bound not reached: every step


def test_a_restarted_job_continues_with_what_remains_of_its_budget(tmp_path):
    clock = Clock()
    p = planner(clock, budget=100.0, used=40.0, progress=0.5)
    # 40 s used before: this run's deadline is 60 s from its start, the progress goes on from 0.5.
    assert p.deadline == 60.0
    plan = p.begin(400)
    assert (plan.anchor_step, plan.anchor_progress) == (400, 0.5)
    clock.now = 12.0
    state = p.record(450)
    assert state.used_secs == 52.0 and state.step == 450 and state.progress == pytest.approx(plan.progress(450))
    (tmp_path / "budget.json").write_text(state.to_json())
    assert BudgetState.load(str(tmp_path), 100.0) == state
    assert BudgetState.load(str(tmp_path / "new"), 90.0) == BudgetState(90.0)


def rates_through_the_graph(plans_and_steps, schedule="onecycle", peak=0.4, warmup=0.2):
    """The learning rate at each (plan, step), loading each plan into the graph as the hook does."""
    with tf.Graph().as_default():
        step = v1.placeholder(tf.int64, [])
        progress = schedules.progress_tensor(step)
        rate = schedules.learning_rate_at_progress(progress, schedule, peak, warmup)
        op, feeds = schedules.plan_loader(v1.get_default_graph())
        with v1.Session() as sess:
            sess.run(v1.local_variables_initializer())
            out = []
            for plan, s in plans_and_steps:
                sess.run(op, dict(zip(feeds, (plan.anchor_step, plan.anchor_progress, plan.total_steps))))
                out.append(float(sess.run(rate, {step: s})))
            return out


def test_the_learning_rate_is_continuous_across_a_re_plan_and_reaches_zero():
    first = Plan(0, 0.0, 1000)
    second = Plan(400, first.progress(400), 700)  # fewer steps fit: the rest of the decay goes faster
    before, after, end, halfway = rates_through_the_graph([(first, 400), (second, 400), (second, 700), (second, 550)])
    # onecycle, peak 0.4, up over the first 20%: at progress 0.4 it is 0.4 x (1 - 0.2 / 0.8) = 0.3.
    assert before == pytest.approx(0.3) and after == pytest.approx(before)
    assert end == 0.0
    assert halfway == pytest.approx(0.4 * (1 - (0.7 - 0.2) / 0.8))  # progress 0.4 + 0.6 x 1/2
    warm = rates_through_the_graph([(first, 100)], schedule="cosine", warmup=0.2)[0]
    assert warm == pytest.approx(0.4 * 0.1 / 0.2)


def test_budget_flags_are_checked(mini_records, tmp_path, capsys):
    # In process: the trainer's parser and configuration, as its command line runs them (exit status 2).
    from estimator import cifar10_main

    base = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "j"), "--num-gpus", "0"]
    for flags, message in [
        (["--time-budget", "5m", "--train-steps", "10", "--lr-schedule", "onecycle"], "plans the number of steps"),
        (["--time-budget", "5m"], "--lr-schedule cosine or onecycle \\(not piecewise\\)"),
        (["--time-budget", "5m", "--lr-schedule", "cosine", "--warmup-epochs", "1"], "drop --warmup-epochs"),
        (["--time-budget", "5x", "--lr-schedule", "cosine"], "'5x' is not a positive duration"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            cifar10_main.parse(base + flags)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and re.search(message, err), err[-2000:]
        assert not os.path.exists(str(tmp_path / "j"))


@pytest.mark.slow
def test_a_real_run_ends_within_its_budget_and_a_restart_uses_what_remains(mini_records, tmp_path):
    from estimator.budget import job as budget_job
    from estimator.budget import probes as speed_probes

    job, cache = str(tmp_path / "job"), str(tmp_path / "cache")
    flags = ["--data-dir", mini_records, "--job-dir", job, "--probe-cache", cache] + (
        "--num-gpus 0 --num-layers 8 --train-batch-size 64 --eval-batch-size 339 --time-budget 40s "
        "--lr-schedule onecycle --eval-policy final --seed 1 --log-every-n-steps 20 --health-checks off"
    ).split()

    # The network's figures cached far below its speed (100 images/s; it trains at about 1,768 on a Zen 4): the
    # run plans from them at first, then re-plans from its own steps.
    def slow(*_, **__):
        return {"train": 100.0, "eval": 300.0}

    speed_probes.network_speed(budget_job.parse(flags)[0], timer=slow)
    code, out = run_main(*flags)
    assert code == 0, out[-3000:]
    results = json.load(open(os.path.join(job, "results.json")))
    recorded = json.load(open(os.path.join(job, "hparams.json")))["hparams"]
    assert recorded["time_budget"] == 40.0 and recorded["train_steps"] is None
    assert recorded["speed_probe"]["train"] == 100.0, (results, out[-3000:])
    assert results["time_budget_secs"] == 40.0
    budget = json.load(open(os.path.join(job, "budget.json")))
    # Training ends at its deadline, keeping the reserve (8 s and the evaluation images at the speed
    # measured) for what follows: budget.json is written as training ends. Relations of the job's own
    # accounting, true on any CPU; how close the whole command comes to its budget on each CPU, alone and
    # with a core taken, is benchmarks.contention's to measure.
    assert budget["used_secs"] <= 40.0 - results["final_secs_reserved"] + 0.5, (budget, results)
    assert results["final_secs_reserved"] >= time_budget.FINAL_FIXED_SECS
    assert budget["used_secs"] + results["final_secs_reserved"] >= 0.9 * 40.0, (budget, results)
    assert results["evaluation_speedup"] > 1 and results["training_setup_secs"] > 0, results
    assert results["checkpoint_save_secs"] > 0, results  # the saves were timed, for the end's reserve
    assert 0 < results["final_test_eval_secs"] < results["final_secs"], results  # the export and pictures besides
    # ... and of the evaluation, its set-up (graph, restore) timed apart from its images.
    assert 0 < results["final_test_eval_setup_secs"] < results["final_test_eval_secs"], results
    # The end's time as recorded (final_secs, wall_secs) includes the pictures: curves.png comes first.
    assert os.path.getmtime(os.path.join(job, "curves.png")) <= os.path.getmtime(os.path.join(job, "results.json"))
    assert results["planned_steps"] == results["replans"][0]["planned_steps"] > 0
    assert "budget left" in out and "time budget: planned at step" in out
    # The plan done, or, where the machine slowed in the last seconds (the other test process), too late to re-plan,
    # the hard stop at the training deadline, which the run records: both are the job's own accounting. How much
    # of its last plan a run so stopped reached depends on how much the machine slowed: not asserted.
    if not results["stopped_at_the_deadline"]:
        assert budget["progress"] == pytest.approx(1.0, abs=0.02), (budget, results)
        assert results["global_step"] >= 0.9 * results["replans"][-1]["planned_steps"], (budget, results)
    assert 0 < budget["progress"] <= 1.0 + 1e-9, (budget, results)
    # The same command again: the budget is spent, so training stops at once and the job
    # evaluates and exports what it has.
    code, out = run_main(*flags)
    assert code == 0, out[-3000:]
    again = json.load(open(os.path.join(job, "results.json")))
    assert again["budget_used_by_earlier_runs_secs"] == pytest.approx(budget["used_secs"], abs=0.01)
    assert again["global_step"] <= results["global_step"] + 1


@pytest.mark.slow
def test_precision_auto_records_its_choice_and_probe(mini_records, tmp_path):
    """--precision auto as the trainer resolves its flags and environment (in this process; the auto job of
    test_network_choice trains with it): the probe's figures and its cache natively, nothing timed held to AVX2."""
    from estimator.budget import job as budget_job
    from estimator.budget import probes as speed_probes

    flags = "--num-gpus 0 --num-layers 8 --train-steps 2 --precision auto --eval-policy final --export false"
    argv = ["--data-dir", mini_records, "--job-dir", str(tmp_path / "job"), *flags.split()]
    environ = dict(os.environ)  # this process's oneDNN, held or not, times the probe
    hp, _ = budget_job.parse(argv, environ=dict(environ, CIFAR10_CACHE_DIR=str(tmp_path / "cache")))
    if machine.native_bf16(machine.cpu_info()):
        probe = hp.precision_probe
        assert set(probe) == {"fp32", "bf16"} and hp.precision == max(probe, key=probe.get)
        assert os.path.exists(str(tmp_path / "cache" / speed_probes.CACHE_FILE))
    else:  # an AVX2-only CPU: bf16 ruled out by its flags, nothing timed
        assert hp.precision_probe == {} and hp.precision == "fp32"
    # oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA, as on an AVX2-only CPU): bf16 is ruled out whatever the CPU's
    # flags, and nothing is timed (TensorFlow would abort on a bf16 matrix product there).
    held_environ = dict(environ, CIFAR10_CACHE_DIR=str(tmp_path / "cache2"), ONEDNN_MAX_CPU_ISA="AVX2")
    held, _ = budget_job.parse(argv, environ=held_environ)
    assert (held.precision, held.precision_probe) == ("fp32", {})
    assert not os.path.exists(str(tmp_path / "cache2" / speed_probes.CACHE_FILE))
    assert not os.path.exists(str(tmp_path / "job"))  # resolved, not trained


def test_precision_auto_never_picks_bf16_without_native_support(tmp_path):
    from estimator.budget import probes as speed_probes
    from tests.helpers import hp

    def no_timing(*_):
        raise AssertionError("nothing is timed where the CPU's flags rule bf16 out")

    avx2 = {"model": "AMD EPYC", "flags": {"avx2", "fma", "avx512f"}}
    assert speed_probes.choose(hp(), cpu=avx2, timer=no_timing, cache_file=str(tmp_path / "c.json")) == ("fp32", {})
    # A CPU with AMX whose oneDNN is held below bf16 (ONEDNN_MAX_CPU_ISA): as an AVX2-only one.
    for isa in ("AVX2", "AVX512_CORE", "AVX2_VNNI_2", "SOMETHING_ELSE"):
        held = {"model": "Xeon", "flags": {"amx_bf16", "avx512_bf16"}, "isa": isa}
        assert speed_probes.choose(hp(), cpu=held, timer=no_timing, cache_file=str(tmp_path / "c.json")) == ("fp32", {})
    assert not os.path.exists(str(tmp_path / "c.json"))
    for isa in ("", "AVX512_CORE_BF16", "AVX512_CORE_AMX", "ALL"):
        assert machine.native_bf16({"flags": {"amx_bf16"}, "isa": isa}), isa


def test_precision_auto_untimed_takes_bf16_for_airbench_where_native_and_says_why(tmp_path):
    # A budget under PROBED_BUDGET_SECS with nothing cached times nothing: airbench's members trained faster
    # in bf16 on every CPU where it is native (x0.375 tied), the ResNets not always.
    from estimator.budget import probes as speed_probes
    from tests.helpers import hp

    def no_timing(*_, **__):
        raise AssertionError("nothing is timed in a budget too short for probes")

    amx = {"model": "Xeon", "flags": {"amx_bf16", "avx512_bf16"}, "isa": ""}
    cache = str(tmp_path / "c.json")
    airbench, resnet = hp(network="airbench", time_budget=90.0), hp(network="resnet", time_budget=90.0)
    assert speed_probes.choose(airbench, cpu=amx, timer=no_timing, cache_file=cache, measure=False) == ("bf16", {})
    assert speed_probes.choose(resnet, cpu=amx, timer=no_timing, cache_file=cache, measure=False) == ("fp32", {})
    assert not os.path.exists(cache)
    assert speed_probes.untimed_reason(airbench, amx) == (
        "not timed in a budget under 0:02:00; by estimate for the airbench network"
    )
    assert speed_probes.untimed_reason(resnet, amx) == (
        "not timed in a budget under 0:02:00; by estimate for the resnet network"
    )
    held = dict(amx, isa="AVX2")
    assert speed_probes.choose(airbench, cpu=held, timer=no_timing, cache_file=cache, measure=False) == ("fp32", {})
    assert speed_probes.untimed_reason(airbench, held) == "this CPU lacks native bf16"


@pytest.mark.bf16_kernels
def test_precision_auto_times_the_real_network_and_caches_it(tmp_path):
    from estimator.budget import probes as speed_probes
    from tests.helpers import hp

    amx = {"model": "a CPU with AMX", "flags": {"amx_bf16", "avx512_bf16"}}
    small = hp(train_batch_size=8)
    cache = str(tmp_path / "probe.json")
    choice, probe = speed_probes.choose(small, cpu=amx, cache_file=cache)
    assert set(probe) == {"fp32", "bf16"} and all(v > 0 for v in probe.values())
    assert choice == max(probe, key=probe.get)

    def no_timing(*_, **__):
        raise AssertionError("a cached probe is not timed again")

    assert speed_probes.choose(small, cpu=amx, timer=no_timing, cache_file=cache) == (choice, probe)
    # Another network is another entry: timed again.
    with pytest.raises(AssertionError, match="not timed again"):
        speed_probes.choose(small.replace(num_layers=14), cpu=amx, timer=no_timing, cache_file=cache)
    assert np.isfinite(list(probe.values())).all()
    # So is the same network after its code changed: an entry under the key without the code's digest
    # (as every key was before it) is not taken.
    key = speed_probes.cache_key(amx, small)
    assert key.endswith("|" + speed_probes.network_code_digest())
    with open(cache) as f:
        entries = json.load(f)
    assert len(entries) == 2 and all(k.startswith(key + "|") for k in entries)  # fp32 and bf16
    # bf16's evaluation timed too (where it is native, the budget plans with it); fp32's training alone.
    assert sorted(sorted(v) for v in entries.values()) == [["eval", "train"], ["train"]]
    assert [k for k, v in entries.items() if set(v) == {"train"}][0].endswith("|fp32|%d|train" % small.eval_batch_size)
    with open(cache, "w") as f:
        json.dump({k.replace("|" + speed_probes.network_code_digest(), ""): v for k, v in entries.items()}, f)
    with pytest.raises(AssertionError, match="not timed again"):
        speed_probes.choose(small, cpu=amx, timer=no_timing, cache_file=cache)


def test_precision_auto_times_fp32s_training_at_a_quarter_of_the_batch_and_bf16_at_the_jobs(tmp_path):
    # fp32 is timed only to be compared: at 128 images a tower its first step costs a first run a quarter
    # of 512's, and for half as long. bf16's speeds are the ones the budget plans with: the job's batches'.
    from estimator.budget import probes as speed_probes
    from tests.helpers import hp

    zen4 = {"model": "AMD EPYC", "family": "25", "model_number": "17", "flags": {"avx512_bf16"}, "cores": 2}
    timed = []

    def timer(probe_hp, precision, max_secs=speed_probes.PROBE_SECS, evaluate=True):
        timed.append((precision, probe_hp.train_batch_size, probe_hp.eval_batch_size, max_secs, evaluate))
        rate = {"fp32": 859.0, "bf16": 1286.0}[precision]
        return {"train": rate, "eval": 3.5 * rate} if evaluate else {"train": rate}

    cases = [(dict(train_batch_size=512, eval_batch_size=500), 128), (dict(train_batch_size=96), 96)]
    cases.append((dict(train_batch_size=512, eval_batch_size=500, num_cpu_towers=2), 256))
    for i, (settings, fp32_batch) in enumerate(cases):
        timed.clear()
        job = hp(**settings)
        assert speed_probes.choose(job, cpu=zen4, timer=timer, cache_file=str(tmp_path / ("%d.json" % i))) == (
            "bf16",
            {"fp32": 859.0, "bf16": 1286.0},
        )
        assert sorted(timed) == [  # fp32 for half as long: it is only compared
            ("bf16", job.train_batch_size, job.eval_batch_size, 1.0, True),
            ("fp32", fp32_batch, job.eval_batch_size, 0.5, False),
        ]


def test_the_networks_code_digest_follows_every_byte_of_it(tmp_path):
    from estimator.budget import probes as speed_probes

    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    digest = speed_probes.network_code_digest([str(a), str(b)])
    assert len(digest) == 12 and digest == speed_probes.network_code_digest([str(a), str(b)])
    b.write_text("y = 3\n")
    assert speed_probes.network_code_digest([str(a), str(b)]) != digest
    # By default: the modules that build the networks the probes time.
    from estimator.networks import airbench, layers, registry, resnet
    from estimator.ops import filter_gradient, gelu

    modules = [m.__file__ for m in (airbench, registry, resnet, filter_gradient, layers, gelu)]
    assert speed_probes.network_code_digest() == speed_probes.network_code_digest(modules)


def test_the_contention_benchmarks_competitor_takes_one_core_from_its_start_until_stopped():
    """benchmarks.contention's busy loop: a real process, pinned to one core, started after its delay."""
    import time

    from benchmarks.contention import Competitor

    core = min(os.sched_getaffinity(0))
    never = Competitor(core, delay=30)
    never.start()
    assert never.stop() is False and never.process is None  # stopped before its start: nothing ran

    competitor = Competitor(core, delay=0.2)
    competitor.start()
    assert competitor.process is None  # not before its delay
    deadline = time.monotonic() + 10
    while competitor.process is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process = competitor.process
    assert process is not None and process.poll() is None
    deadline = time.monotonic() + 10
    while os.sched_getaffinity(process.pid) != {core} and time.monotonic() < deadline:
        time.sleep(0.05)  # the loop pins itself as it starts
    assert os.sched_getaffinity(process.pid) == {core}
    assert competitor.stop() is True and process.poll() is not None


def test_the_contention_benchmark_judges_a_run_by_the_promise():
    """Held: within the larger of 2 s and 1% past the budget, and after 90% of it."""
    from benchmarks.contention import held

    assert held(302.0, 300.0) and held(299.0, 300.0) and held(270.0, 300.0)
    assert not held(303.1, 300.0)  # past the promise: 3 s past 5 minutes
    assert held(1818.0, 1800.0) and not held(1818.1, 1800.0)  # 1% of 30 minutes
    assert not held(269.9, 300.0)  # the budget left unused
    assert held(92.0, 90.0) and not held(92.1, 90.0) and not held(80.9, 90.0)


def test_the_probes_cache_key_is_what_decides_speed(tmp_path):
    """Under KVM "AMD EPYC" names Zen 3, 4 and 5 alike: the key tells them apart by family, model number
    and flags, and by the cores this process may use and oneDNN's instruction-set cap."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\ncpu family\t: 25\n"
        "model\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n"
    )
    zen3 = machine.cpu_info(str(cpuinfo), environ={})
    assert (zen3["model"], zen3["family"], zen3["model_number"], zen3["flags"]) == (
        "AMD EPYC",
        "25",
        "1",
        {"fpu", "avx2", "fma"},
    )
    assert zen3["isa"] == "" and zen3["cores"] == len(os.sched_getaffinity(0))
    assert not machine.native_bf16(zen3)
    key = machine.cpu_key(zen3)
    assert key.startswith("AMD EPYC|family 25 model 1|flags ") and key.endswith("cores|isa any")
    zen5 = dict(zen3, family="26", model_number="2", flags=zen3["flags"] | {"avx512f", "avx512_bf16"})
    others = [
        zen5,
        dict(zen3, model_number="17"),
        dict(zen3, flags=zen3["flags"] | {"avx512f"}),
        dict(zen3, cores=zen3["cores"] + 1),
        dict(zen3, isa="AVX2"),
    ]
    keys = {machine.cpu_key(c) for c in others}
    assert len(keys) == len(others) and key not in keys
    assert machine.native_bf16(zen5) and not machine.native_bf16(dict(zen5, isa="AVX2"))
    held = machine.cpu_info(str(cpuinfo), environ={"ONEDNN_MAX_CPU_ISA": "avx2"})
    assert held["isa"] == "AVX2" and machine.cpu_key(held).endswith("|isa AVX2")


def test_a_probe_is_the_median_run_so_a_burst_of_another_process_does_not_stick():
    """Three of eight timed runs slowed tenfold by another process (a burst at start-up): the probe,
    cached for every later job, still gives the machine's speed."""

    class Session:
        def __init__(self, durations):
            self.durations, self.runs = list(durations), 0

        def run(self, fetch):
            self.runs += 1
            clock.now += self.durations.pop(0)

    clock = Clock()
    durations = [5.0, 5.0] + [1.0, 1.0, 1.0, 10.0, 10.0, 10.0, 1.0, 1.0]  # 2 warm-up, 8 timed
    session = Session(durations)
    assert machine.seconds_per_run(session, None, 8, 2, clock=clock) == 1.0 and session.runs == 10
    even = Session([2.0, 4.0, 10.0, 3.0])
    assert machine.seconds_per_run(even, None, 4, 0, clock=clock) == 3.5


@pytest.mark.parametrize("probe", [None, 800.0])
def test_a_burst_at_start_up_does_not_stop_training(probe):
    """Another process takes both cores for the first 40 s of a 300 s budget (a twentieth of the speed):
    the first plan is made at that speed, where evaluating 60,000 images would take 375 s, more than the
    budget. Planned from that alone, training stops at once (the AVX2 EPYC's 5-minute job that trained 23
    steps); with the start-up probe's speed (800 images/s), the end's reserve assumes at worst a third of it,
    so training goes on, re-plans as the machine comes back and ends at the deadline."""
    clock = Clock()
    p = planner(clock, budget=300.0, final_images=60000, fixed=8.0)
    p.probe_images_per_sec = probe
    p.__post_init__()
    p.begin(0)
    step = 0
    while True:
        clock.now += (20.0 if clock.now < 40 else 1.0) / 8.0
        step += 1
        p.after_step(step)
        if p.should_stop(step):
            break
    if probe is None:
        assert p.stopped_early and step < 30 and clock.now < 45
        return
    # At 8 steps/s (800 images/s, evaluation 3,200): 60,000 images take 18.75 s; training ends then.
    assert not p.stopped_early and p.final_secs() == pytest.approx(8.0 + 18.75)
    assert 300 - 8 - 18.75 - 0.5 <= clock.now <= 300 - 8 - 18.75
    assert step > 0.8 * 8 * (300 - 40 - 26.75)


@pytest.mark.parametrize("steps_per_sec_under_contention", [2.2, 1.6, 1.2])
def test_a_full_size_speed_estimated_from_small_images_does_not_raise_the_ends_floor(steps_per_sec_under_contention):
    """--progressive-resize 20 on a machine 1.4x faster for the first 60 s: the full-size speed estimated from
    the small images then (5.7 steps/s) is not measured, and does not lift the end's floor above a third of
    the probe's 4 steps/s. From 90 s a core is taken (2.2 full-size steps/s, 1.8x slower than the probe; 1.6,
    2.5x slower, as a busy loop left airbench94 held to AVX2): the reserve follows that speed and the end, at
    its true cost, fits the budget (a floor at a third of 5.7, or at half the probe's, would not let it at
    1.6). At 1.2 steps/s (3.3x slower) the floor, a third of the probe's, still holds the reserve: what a
    burst at start-up needs (above)."""
    sizes = schedules.ImageSizes(20, 0.5, 32)
    clock = Clock()
    p = planner(clock, budget=300.0, final_images=60000, fixed=8.0)
    p.step_cost, p.probe_images_per_sec = sizes, 400.0
    p.__post_init__()
    p.begin(0)
    step = 0

    def full_size_steps_per_sec():
        return 4.0 / 0.7 if clock.now < 60 else (4.0 if clock.now < 90 else steps_per_sec_under_contention)

    while True:
        side = sizes.size_at(p.plan.progress(step))
        clock.now += (side / 32) ** 2 / full_size_steps_per_sec()
        step += 1
        p.after_step(step)
        if p.should_stop(step):
            break
    assert max(r["full_size_steps_per_sec"] for r in p.state.replans) == pytest.approx(4.0 / 0.7, rel=1e-3)
    assert p.best_full_size_steps_per_sec == 4.0  # the probe's: nothing measured at full size beat it
    floor = 4.0 / 3
    assumed = max(steps_per_sec_under_contention, floor)
    assert p.final_secs() == pytest.approx(8.0 + 60000 / (4.0 * 100 * assumed), rel=1e-2)
    end = clock.now + 8.0 + 60000 / (4.0 * 100 * steps_per_sec_under_contention)  # what the end really takes
    if steps_per_sec_under_contention >= floor:
        assert 299.0 <= end <= 300.0 + 1.0 / steps_per_sec_under_contention
    else:
        assert end > 300.0  # beyond BURST_FACTOR's floor, by design: a burst at start-up must not end training


def test_the_budget_counts_from_the_process_start_the_kernel_records(tmp_path):
    """--time-budget's clock starts when the kernel started the process (its start in clock ticks after
    boot, against the uptime), not when Python reached the package: the interpreter's start is the user's
    time too."""
    import os as os_

    from estimator.common.processes import seconds_since_start

    hz = os_.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 18 + [str(250 * hz)] + ["0"] * 30  # field 22 (starttime) at 250 s after boot
    stat, uptime = tmp_path / "stat", tmp_path / "uptime"
    stat.write_text("4242 (python (odd) name) %s\n" % " ".join(fields))
    uptime.write_text("253.75 1000.00\n")
    assert seconds_since_start(str(stat), str(uptime)) == pytest.approx(3.75)
    assert seconds_since_start(str(tmp_path / "missing"), str(uptime)) == 0.0
    # This process: pytest ran a while before this test, and the package's clock starts at that start.
    import time as clock

    from estimator.common import processes

    assert seconds_since_start() > 0
    assert abs(processes.started_at() - (clock.monotonic() - seconds_since_start())) <= 0.05  # 10 ms ticks


def test_a_command_imports_without_collections_and_exits_with_its_status_after_freezing_its_objects(tmp_path):
    """processes.imports_uncollected, around every command's imports, and processes.exit_with, every command's
    exit: the garbage collector's walks over TensorFlow's objects cost about 1 s of a budget at each end. The
    collector is back on after the imports (a failed one too); the exit keeps sys.exit's status and atexit."""
    import subprocess
    import sys

    from tests.helpers import REPO

    out = tmp_path / "atexit.txt"
    script = (
        "import atexit, gc\n"
        "from estimator.common import processes\n"
        "try:\n"
        "    with processes.imports_uncollected():\n"
        "        print('during', gc.isenabled())\n"
        "        import no_such_module_here\n"
        "except ImportError:\n"
        "    print('after', gc.isenabled())\n"
        "from estimator import cifar10_main\n"
        "print('trainer', gc.isenabled(), gc.get_freeze_count() > 100000)\n"
        "atexit.register(lambda: open(%r, 'w').write('frozen %%d' %% gc.get_freeze_count()))\n"
        "objects = [[i] for i in range(1000)]\n"
        "processes.exit_with(3)\n" % str(out)
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.splitlines() == ["during False", "after True", "trainer True True"]  # TensorFlow's, frozen
    frozen = int(out.read_text().split()[1])
    assert frozen >= 1000 + 100000  # the list's objects too
    # Every command of the package ends through it.
    mains = [
        os.path.join(root, name)
        for root, _, names in os.walk(os.path.join(REPO, "estimator"))
        for name in names
        if name.endswith(".py") and 'if __name__ == "__main__":' in open(os.path.join(root, name)).read()
    ] + [os.path.join(REPO, "generate_cifar10_tfrecords.py")]
    assert len(mains) == 8
    for path in mains:
        assert open(path).read().endswith('if __name__ == "__main__":\n    processes.exit_with(main())\n'), path


def test_the_end_reserve_benchmark_reads_recorded_runs_and_what_a_cut_would_do(tmp_path, capsys):
    from benchmarks import end_reserve

    run = {"time_budget_secs": 300.0, "wall_seconds": 294.0, "final_secs_reserved": 20.0, "final_secs": 15.0}
    nested = {"native": {"runs": [run, dict(run, wall_seconds=None)]}}  # the second: no whole-command time
    (tmp_path / "a.json").write_text(json.dumps(nested))
    recorded = dict(run, final_secs=19.5, wall_seconds=299.0, final_test_eval_secs=15.25)
    (tmp_path / "b.json").write_text(json.dumps([recorded]))
    runs = end_reserve.recorded_runs(str(tmp_path))
    assert [name for name, _ in runs] == ["a.json", "b.json"]
    # 5 s unused: a cut of 3 s ends at 297 s; of 6 s, at 299 s (the views that no longer fit are dropped).
    assert end_reserve.with_cut(run, 3.0) == -3.0 and end_reserve.with_cut(run, 6.0) == -1.0
    assert end_reserve.with_cut(runs[1][1], 3.0) == pytest.approx(-0.5)  # only 0.5 s was left unused
    assert end_reserve.main(["--results", str(tmp_path), "--cuts", "3"]) == 0
    out = capsys.readouterr().out
    assert "2 runs; the end's reserve left unused: least 0.50 s" in out
    # Only b.json's run records its test evaluation: the rest of its end took 19.5 - 15.25 s.
    assert end_reserve.rest_of_end(runs) == [4.25]
    assert "1 runs record their test evaluation: the rest of the end took 4.25-4.25 s, median 4.25" in out
    with pytest.raises(SystemExit):
        end_reserve.main(["--results", str(tmp_path / "none")])
