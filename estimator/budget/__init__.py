"""``--time-budget``, ``--network auto`` and ``--precision auto``: what this machine affords, measured.

* ``job``: the budget's two calls from a job: ``choose`` from the configuration, ``BudgetedJob`` beside training;
* ``planner``: the steps a budget buys, planned and re-planned from measured speed (pure Python);
* ``hooks``: the hook that runs the planner (loading ``schedules.progress_tensor``'s plan), the checkpoints' timer;
* ``probes``: this network's speed on this CPU, timed in seconds and cached; ``--precision auto``;
* ``family``: airbench's family and the rule that picks a member from its table of accuracy against epochs;
* ``choice``: ``--network auto`` from those.

Above the core: nothing in ``training``, ``train``, ``serving`` or ``resilience`` imports it (docs/layout.md).
"""
