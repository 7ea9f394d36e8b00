"""CIFAR-10 as TFRecords, from the archive to the batches.

* ``records``: the record format (keys, shapes, class names, subsets, file names, manifest): one owner
  for the converter and the reader.
* ``download``: streaming, resumable, verified downloads; ``convert``: archive to TFRecords
  (``generate_cifar10_tfrecords.py``).
* ``pipeline``: ``Cifar10DataSet``, the input pipeline (``estimator.cifar10`` under the tutorial's name).
"""
