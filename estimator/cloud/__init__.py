"""estimator.cloud."""
