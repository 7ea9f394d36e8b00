"""Where variables and tower ops go.

A tower's ops run on its own device; its variables go to a parameter device:
the CPU (``--variable-strategy CPU``, a parameter-server layout on one
machine) or one of the GPUs, chosen greedily to even out the bytes each holds
(``GPU``). In a distributed job the Estimator wraps the ``model_fn`` in a
replica device setter that adds ``/job:ps/task:k`` to variables and the worker's
job to everything else; the device strings made here only fill in the device
type and index, so the two compose.
"""

from __future__ import annotations

from estimator.common.options import VariableStrategy

# TensorFlow is imported in the functions that build tensors: ``HParams`` imports this module, and the cloud
# tools import ``HParams`` without TensorFlow (seconds).

VARIABLE_OPS = ("Variable", "VariableV2", "VarHandleOp")


def tower_devices(num_gpus: int, num_cpu_towers: int):
    """Devices that each run one tower: GPUs, else N CPU devices, else the CPU."""
    if num_gpus > 0:
        return ["/gpu:%d" % i for i in range(num_gpus)]
    return ["/cpu:%d" % i for i in range(max(1, num_cpu_towers))]


def visible_gpus() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def _merge(device: str, current: str) -> str:
    import tensorflow as tf

    # Whatever is already set on the op (an explicit tf.device) wins.
    return tf.DeviceSpec.from_string(device).make_merged_spec(tf.DeviceSpec.from_string(current or "")).to_string()


class GreedyPlacer(object):
    """Puts each new variable on the parameter device holding the fewest bytes."""

    def __init__(self, devices):
        self.devices = list(devices)
        self.load = [0] * len(self.devices)

    def __call__(self, op) -> str:
        import tensorflow as tf

        i = self.load.index(min(self.load))
        shape = tf.TensorShape(op.get_attr("shape"))
        dtype = tf.as_dtype(op.get_attr("dtype"))
        self.load[i] += (shape.num_elements() or 1) * dtype.size
        return self.devices[i]


def device_setter(worker_device: str, parameter_device):
    """A device function: variables to ``parameter_device`` (a string or a placer), the rest to
    ``worker_device``."""

    def choose(op):
        if op.type in VARIABLE_OPS:
            target = parameter_device(op) if callable(parameter_device) else parameter_device
            return _merge(target, op.device)
        return _merge(worker_device, op.device)

    return choose


def parameter_devices(variable_strategy: str, towers):
    """The device (or placer over devices) that holds the variables."""
    if variable_strategy == VariableStrategy.GPU:
        return GreedyPlacer(towers)
    return "/cpu:0"


def consolidation_device(variable_strategy: str) -> str:
    """Where the learning-rate schedule, optimizer step and metrics run."""
    return "/gpu:0" if variable_strategy == VariableStrategy.GPU else "/cpu:0"
