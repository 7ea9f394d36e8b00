"""estimator.common."""
