"""estimator.training."""
