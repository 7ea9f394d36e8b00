"""estimator.ops."""
