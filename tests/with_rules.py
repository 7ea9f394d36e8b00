"""The trainer with some health-rule thresholds changed, for tests that need a rule to fire (or to wait):
``python -m tests.with_rules '{"LOSS_WINDOW": 100}' TRAINER_FLAGS...``."""

import json
import sys

from estimator.common import processes
from estimator.health import rules

if __name__ == "__main__":
    for name, value in json.loads(sys.argv[1]).items():
        if not hasattr(rules, name):
            sys.exit("tests.with_rules: estimator.health.rules has no %s" % name)
        setattr(rules, name, value)
    from estimator import cifar10_main

    processes.exit_with(cifar10_main.main(sys.argv[2:]))
