"""The budget's side of the session: the hook that runs the ``planner.Planner`` beside training (it loads each
plan into the graph's ``schedules.progress_tensor``), and the timer of checkpoint saves."""

from __future__ import annotations

import tensorflow as tf

from estimator.budget.planner import BUDGET_FILE, Plan, Planner
from estimator.common import durations, storage, tensor_names
from estimator.training.schedules import plan_loader

v1 = tf.compat.v1


class BudgetHook(v1.train.SessionRunHook):
    """Runs ``planner`` beside training: loads each plan into the graph (``schedules.progress_tensor``), stops training
    when the plan is done or the time for training is up, and keeps ``JOB_DIR/budget.json`` current."""

    def __init__(self, planner: Planner, job_dir: str, log):
        self._planner, self._job_dir, self._log = planner, job_dir, log

    def begin(self):
        self._step = tensor_names.global_step_read()
        self._loader = plan_loader(v1.get_default_graph())

    def _load(self, session, plan: Plan):
        if self._loader is not None:
            op, feeds = self._loader
            session.run(op, dict(zip(feeds, (plan.anchor_step, plan.anchor_progress, plan.total_steps))))

    def _save(self, step: int):
        self._planner.record(step)
        storage.write_text(storage.join(self._job_dir, BUDGET_FILE), self._planner.state.to_json())

    def after_create_session(self, session, coord):
        step = int(session.run(self._step))
        self._load(session, self._planner.begin(step))

    def before_run(self, run_context):
        return v1.train.SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        planner = self._planner
        step = int(run_values.results) + 1  # read before this step's update
        old = planner.plan
        plan = planner.after_step(step)
        if plan is not None:
            self._load(run_context.session, plan)
            what = "re-planned" if len(planner.state.replans) > 1 else "planned"
            left = durations.format_clock(planner.deadline - planner.clock())
            self._log(
                "time budget: %s at step %d: %.2f steps/s, %d steps in all (was %d), %s left"
                % (what, step, planner.steps_per_sec, plan.total_steps, old.total_steps, left)
            )
            self._save(step)
        if planner.should_stop(step):
            if planner.stopped_early:
                self._log(
                    "time budget: the time for training is up at step %d of %d; stopping to evaluate and export"
                    % (step, planner.plan.total_steps)
                )
            run_context.request_stop()

    def end(self, session):
        self._planner.end_training()
        self._save(int(session.run(self._step)))


class CheckpointTimer(tf.estimator.CheckpointSaverListener):
    """Tells ``planner`` what each checkpoint took to save: the end keeps time to write as much again
    (``Planner.checkpoint_secs``)."""

    def __init__(self, planner: Planner):
        self._planner = planner

    def before_save(self, session, global_step_value):
        self._began = self._planner.clock()

    def after_save(self, session, global_step_value):
        self._planner.checkpoint_secs = self._planner.clock() - self._began
