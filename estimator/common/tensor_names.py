"""Names of the graph tensors that hooks fetch by name: shared vocabulary of ``model_fn``, which
names them, and the hooks and health checks that read them, so it lives below both.

Not "loss": that name (and TensorBoard tag) is the Estimator's own.
"""

TOTAL_LOSS = "total_loss:0"
CROSS_ENTROPY = "cross_entropy:0"
TRAIN_ACCURACY = "train_accuracy:0"
LEARNING_RATE = "learning_rate:0"
# --progressive-resize: the side of this step's training images.
IMAGE_SIZE = "image_size:0"
