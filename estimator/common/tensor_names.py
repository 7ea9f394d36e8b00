"""Names in the graph that several modules spell: the tensors hooks fetch by name (``model_fn`` names
them; the hooks and health checks read them), the global step as hooks fetch it, and the network's variable
scope, so they live below all.

Not "loss": that name (and TensorBoard tag) is the Estimator's own.
"""

TOTAL_LOSS = "total_loss:0"
CROSS_ENTROPY = "cross_entropy:0"
TRAIN_ACCURACY = "train_accuracy:0"
LEARNING_RATE = "learning_rate:0"
MUON_LEARNING_RATE = "muon_learning_rate:0"
# --progressive-resize: the side of this step's training images.
IMAGE_SIZE = "image_size:0"

# The variable scope of every network's variables, hence of every checkpoint's names ("resnet/fc/kernel"):
# the tutorial's, kept for the airbench network too so that tools and job dirs read both alike.
NETWORK_SCOPE = "resnet"


def layer_name(name: str) -> str:
    """``tower_0/resnet/stage1/unit2/Relu_1`` -> ``stage1/unit2/Relu_1``; ``resnet/fc/kernel`` -> ``fc/kernel``."""
    for prefix in ("tower_0/", NETWORK_SCOPE + "/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name


def global_step_read():
    """The global step as the Estimator reads it before a step (TensorFlow's own hooks fetch it): it builds every
    op of ``model_fn`` after this read, so a hook's fetch is the step before the run's update. The variable
    itself, fetched in the same run as the train op, races with the update."""
    from tensorflow.python.training import training_util  # TensorFlow: the cloud tools read this module without it

    return training_util._get_or_create_global_step_read()
