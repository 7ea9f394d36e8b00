"""``--time-budget``, ``--network auto`` and ``--precision auto``: what this machine affords, measured.

* ``planner``: the steps a budget buys, planned and re-planned from measured speed (pure Python);
* ``hooks``: the plan's progress in the graph, the hook that runs the planner, the checkpoints' timer;
* ``probes``: this network's speed on this CPU, timed in seconds and cached; ``--precision auto``;
* ``family``: airbench's family and the rule that picks a member from its table of accuracy against epochs;
* ``choice``: ``--network auto`` from those, one call from the configuration.
"""
