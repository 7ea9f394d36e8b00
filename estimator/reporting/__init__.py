"""estimator.reporting."""
