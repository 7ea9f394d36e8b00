"""estimator.networks."""
