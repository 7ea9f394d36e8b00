"""Where jobs run beyond one process: Google Cloud and local clusters.

* ``vertex_job``: a Vertex AI ``CustomJobSpec`` from ``cmle_config.yaml``'s ``trainingInput`` machines.
* ``vertex_study``: a Vertex AI ``HyperparameterTuningJob`` from ``hptuning_config.yaml``'s study, and
  the finished trials of one, read back from its output directory.
* ``rehearsal``: a written Vertex AI job (or one trial of a study) run on this machine as Vertex AI runs it.
* ``commands``: ``python -m estimator.vertex``'s verbs (custom-job, hp-tuning-job, local-run, best-args).
* ``local_cluster``: a ps/worker cluster of real processes on 127.0.0.1, with the ``TF_CONFIG`` the
  service would give each.

Entry points: ``python -m estimator.vertex`` and ``python -m estimator.local_cluster``.
"""
