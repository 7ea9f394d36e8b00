"""The bottom layer: the environment and the vocabulary every other layer shares; imports nothing above.

* ``storage``: local and ``gs://`` files (``google-cloud-storage``); ``failures``: storage errors as
  one line.
* ``cluster``: ``TF_CONFIG``, parsed and built; ``processes``: the trainer's command line, process groups.
* ``logs``: concise logs; ``tensor_names``: the graph tensors hooks fetch by name;
  ``options``: the choices flags name, as enums; ``durations``: ``5m`` read, ``0:04:12`` written.
* ``machine``: this CPU (its kind, native bf16, ``ONEDNN_MAX_CPU_ISA``) and the speed probes' cache.
"""
