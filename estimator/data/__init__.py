"""estimator.data."""
