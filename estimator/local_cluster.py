"""Runs a training job as a cluster of real local processes (``estimator.cloud.local_cluster``).

    python -m estimator.local_cluster --workers 2 --ps 1 [--evaluator] -- \\
        --data-dir DIR --job-dir DIR --num-gpus 0 --train-steps 1000
"""

from estimator.cloud.local_cluster import ClusterError, LocalCluster, Task, build_parser, cluster_spec, free_ports, main
from estimator.common import processes

__all__ = ["ClusterError", "LocalCluster", "Task", "build_parser", "cluster_spec", "free_ports", "main"]

if __name__ == "__main__":
    processes.exit_with(main())
