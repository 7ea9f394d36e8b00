"""``python -m estimator.local_cluster`` was retired in 0.6.0: ``python -m estimator.vertex local-run`` runs a
cluster as Vertex AI runs it, from the job's own config (docs/cloud.md). Its classes are
``estimator.cloud.local_cluster``'s."""

import sys

from estimator.cloud.local_cluster import ClusterError, LocalCluster, Task, cluster_spec, free_ports
from estimator.common import processes

__all__ = ["ClusterError", "LocalCluster", "Task", "cluster_spec", "free_ports"]
RETIRED = (
    "python -m estimator.local_cluster was retired in 0.6.0: write the job's config (python -m estimator.vertex "
    "custom-job) and run it here with python -m estimator.vertex local-run (docs/cloud.md)."
)


def main(argv=None) -> int:
    print("error: " + RETIRED, file=sys.stderr)
    return 2


if __name__ == "__main__":
    processes.exit_with(main())
