"""Training speed: our Estimator model_fn against the same network in Keras ``model.fit``.

    python -m benchmarks.keras_vs_estimator --data-dir work/cifar-10-data \
        --out benchmarks/results/keras_vs_estimator.json

Both train the same ResNet (v1, option-A shortcuts, He init, batch norm with
the same decay and epsilon, L2 weight decay, momentum SGD) on the same
TFRecords through the same input pipeline (``Cifar10DataSet``), channels_last,
on this CPU. Rounds alternate Estimator and Keras in one process, so both see
the same machine load; each reports steady-state images/s after warm-up.

``keras_airbench`` is the recipes' network in Keras (``benchmarks.training_speed
--network airbench`` times it); ``estimator_rate`` and ``keras_rate`` time it when
their arguments say ``network="airbench"``.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from benchmarks.common import write_result  # noqa: E402
from estimator.data.pipeline import Cifar10DataSet  # noqa: E402
from estimator.networks import airbench  # noqa: E402
from estimator.networks.resnet import check_depth  # noqa: E402
from estimator.training import hooks  # noqa: E402
from estimator.training.hparams import HParams  # noqa: E402
from estimator.training.model_fn import model_fn  # noqa: E402


def keras_resnet(num_layers, weight_decay, decay, epsilon):
    """ResNet v1 for CIFAR-10 in Keras, layer for layer as estimator.cifar10_model."""
    layers, reg = tf.keras.layers, tf.keras.regularizers.l2(weight_decay / 2)  # l2_loss is sum/2
    n = check_depth(num_layers)

    def conv(x, filters, stride):
        if stride > 1:
            x = layers.ZeroPadding2D(((0, 1), (0, 1)))(x)  # the model's fixed padding for 3x3
        return layers.Conv2D(
            filters,
            3,
            stride,
            "same" if stride == 1 else "valid",
            use_bias=False,
            kernel_initializer="he_normal",
            kernel_regularizer=reg,
        )(x)

    def bn(x):
        return layers.BatchNormalization(momentum=decay, epsilon=epsilon, gamma_regularizer=reg, beta_regularizer=reg)(
            x
        )

    inputs = tf.keras.Input([32, 32, 3])
    x = layers.Rescaling(1 / 128.0, offset=-1.0)(inputs)
    x = layers.ReLU()(bn(conv(x, 16, 1)))
    filters = [16, 16, 32, 64]
    for stage in range(3):
        for unit in range(n):
            stride = 2 if stage > 0 and unit == 0 else 1
            shortcut = x
            y = layers.ReLU()(bn(conv(x, filters[stage + 1], stride)))
            y = bn(conv(y, filters[stage + 1], 1))
            if stride > 1:
                pad = (filters[stage + 1] - filters[stage]) // 2
                shortcut = layers.AveragePooling2D(2)(shortcut)
                shortcut = layers.Lambda(lambda t, p=pad: tf.pad(t, [[0, 0], [0, 0], [0, 0], [p, p]]))(shortcut)
            x = layers.ReLU()(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(
        10,
        kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
        kernel_regularizer=reg,
        bias_regularizer=reg,
    )(x)
    outputs = layers.Activation("linear", dtype="float32")(outputs)  # float32 logits under mixed policies
    return tf.keras.Model(inputs, outputs)


def keras_airbench(whitening, group_depth, weight_decay, decay, epsilon, width_multiplier=1.0):
    """airbench's network in Keras, layer for layer as estimator.networks.airbench (GELU as Keras has it:
    tf.nn.gelu's ops); ``whitening``: the fixed 2x2 whitening kernel, from the same training images."""
    layers, reg = tf.keras.layers, tf.keras.regularizers.l2(weight_decay / 2)

    def gelu(x):
        return layers.Activation(lambda t: tf.nn.gelu(t, approximate=False))(x)

    def conv(x, width):
        return layers.Conv2D(width, 3, padding="same", use_bias=False, kernel_regularizer=reg)(x)

    def bn(x):  # airbench's batch norm learns only the shift
        return layers.BatchNormalization(momentum=decay, epsilon=epsilon, scale=False, beta_regularizer=reg)(x)

    inputs = tf.keras.Input([32, 32, 3])
    x = layers.Rescaling(1 / 128.0, offset=-1.0)(inputs)
    x = layers.Conv2D(
        airbench.WHITEN_FILTERS,
        airbench.WHITEN_SIZE,
        kernel_initializer=tf.keras.initializers.Constant(whitening),
        trainable=False,
    )(x)
    x = gelu(x)
    for width in (int(round(w * width_multiplier)) for w in airbench.WIDTHS):
        x = gelu(bn(layers.MaxPooling2D(2)(conv(x, width))))
        shortcut = x
        x = gelu(bn(conv(x, width)))
        if group_depth == 3:
            x = gelu(layers.Add()([bn(conv(x, width)), shortcut]))
    x = layers.GlobalMaxPooling2D()(x)
    x = layers.Dense(10, use_bias=False, kernel_regularizer=reg)(x)
    outputs = layers.Rescaling(airbench.LOGIT_SCALE, dtype="float32")(x)  # float32 logits
    return tf.keras.Model(inputs, outputs)


def _network(args):
    """HParams fields of ``args``' network (``args.network``: resnet, the default, or airbench)."""
    if getattr(args, "network", "resnet") == "airbench":
        return {
            "network": "airbench",
            "group_depth": args.group_depth,
            "width_multiplier": getattr(args, "width_multiplier", 1.0),
        }
    return {"num_layers": args.num_layers}


class _KerasSpeed(tf.keras.callbacks.Callback):
    def __init__(self, batch_size, warmup):
        super().__init__()
        self.batch_size, self.warmup, self.steps, self.start, self.end = batch_size, warmup, 0, None, None

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == self.warmup:
            self.start = time.perf_counter()
        self.end = time.perf_counter()

    @property
    def rate(self):
        return (self.steps - self.warmup) * self.batch_size / (self.end - self.start)


def keras_rate(args, policy="float32"):
    """Steady-state images/s of ``model.fit``; ``policy`` is a Keras dtype policy (mixed_bfloat16)."""
    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(0)
    tf.keras.mixed_precision.set_global_policy(policy)
    try:
        if _network(args).get("network") == "airbench":
            images = Cifar10DataSet(args.data_dir, "train").first_images(airbench.WHITEN_IMAGES)
            whitening = airbench.whitening_kernel(images).numpy()
            width = getattr(args, "width_multiplier", 1.0)
            model = keras_airbench(whitening, args.group_depth, 2e-4, args.batch_norm_decay, 1e-5, width)
        else:
            model = keras_resnet(args.num_layers, 2e-4, args.batch_norm_decay, 1e-5)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    data = Cifar10DataSet(args.data_dir, "train", seed=0).dataset(args.batch_size)
    speed = _KerasSpeed(args.batch_size, args.warmup)
    model.fit(data, epochs=1, steps_per_epoch=args.warmup + args.steps, callbacks=[speed], verbose=0)
    return speed.rate


def estimator_rate(args, precision="fp32"):
    """Steady-state images/s of our ``model_fn`` under ``Estimator.train``."""
    data = Cifar10DataSet(args.data_dir, "train", seed=0)
    hp = HParams(
        data_dir=args.data_dir,
        job_dir="",
        num_gpus=0,
        train_batch_size=args.batch_size,
        batch_norm_decay=args.batch_norm_decay,
        precision=precision,
        data_format="channels_last",
        seed=0,
        log_every_n_steps=10**6,
        num_train_examples=data.num_examples_per_epoch(),
        **_network(args),
    )
    speed = hooks.ExamplesPerSecondHook(args.batch_size, warmup_steps=args.warmup)
    with tempfile.TemporaryDirectory() as job_dir:
        config = tf.estimator.RunConfig(
            model_dir=job_dir,
            save_checkpoints_secs=None,
            save_checkpoints_steps=10**9,
            save_summary_steps=10**9,
            log_step_count_steps=10**9,
        )
        est = tf.estimator.Estimator(model_fn, config=config, params=hp.replace(job_dir=job_dir))
        est.train(lambda: data.make_batch(args.batch_size), steps=args.warmup + args.steps, hooks=[speed])
    return speed.steady_state_examples_per_sec


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--num-layers", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batch-norm-decay", type=float, default=0.997)
    parser.add_argument("--steps", type=int, default=100, help="Timed steps per run.")
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/keras_vs_estimator.json")
    args = parser.parse_args(argv)
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.WARN)

    rates = {"estimator model_fn": [], "keras model.fit": []}
    for _ in range(args.rounds):
        rates["estimator model_fn"].append(estimator_rate(args))
        rates["keras model.fit"].append(keras_rate(args))
    best = {k: max(v) for k, v in rates.items()}
    ratio = best["estimator model_fn"] / best["keras model.fit"]
    print(
        "ResNet-%d, batch %d, channels_last, %d timed steps after %d warm-up, %d rounds (best shown)"
        % (args.num_layers, args.batch_size, args.steps, args.warmup, args.rounds)
    )
    print("%-22s %10s  %s" % ("trainer", "images/s", "rounds"))
    for name, r in rates.items():
        print("%-22s %10.1f  %s" % (name, best[name], " ".join("%.1f" % x for x in r)))
    print("estimator / keras: %.2f" % ratio)
    result = {
        "num_layers": args.num_layers,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "images_per_sec": {k: round(v, 1) for k, v in best.items()},
        "rounds": {k: [round(x, 1) for x in v] for k, v in rates.items()},
        "estimator_over_keras": round(ratio, 3),
    }
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
