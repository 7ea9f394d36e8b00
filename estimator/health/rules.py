"""The health rules: pure functions of numbers the trainer already fetched.

Each rule returns ``(value, finding)``: ``value`` goes to TensorBoard as
``health/<rule>`` at every rule step, ``finding`` is None while healthy, else
``(threshold, message)``. Keeping them free of TensorFlow lets the tests check
each boundary with exact numbers. Sources of the defaults:

* loss at initialisation: -ln(1/10) = 2.303 for 10 balanced classes (Karpathy,
  "A Recipe for Training Neural Networks", 2019: "verify loss @ init");
* update/weight ratio, healthy near 1e-3 (CS231n, "Neural Networks Part 3:
  ratio of weights:updates"): the rule only flags the absurd, outside [1e-8, 10];
* vanishing gradients below 1e-7 mean |g| per layer, exploding above 10x the
  running median of the global norm (Pascanu et al. 2013 clip at a multiple of
  the typical norm);
* dead ReLUs: more than half of a layer's channels never positive over a window
  of batches (Karpathy; Lu et al. 2019 "Dying ReLU");
* input statistics: this network scales images as x / 128 - 1, so real images
  give a mean between about -0.2 (the zero padding of distorted crops pulls it
  down) and -0.05, and a std near 0.55 (measured on the real-pixel archive);
  far from that means the pixels were already scaled (0..1) or are not images;
* over-training: validation loss rising over several evaluations while the
  training loss falls; one class far below the rest.
"""

from __future__ import annotations

import math
import statistics

# The rules' thresholds (the sources above; docs/health.md), behind --health-checks; flags until 0.4.0.
INIT_LOSS_TOLERANCE = 0.25
VANISHING_GRADIENT = 1e-7
EXPLODING_FACTOR = 10.0
UPDATE_RATIO_MIN, UPDATE_RATIO_MAX = 1e-8, 10.0
DEAD_RELU_FRACTION, DEAD_RELU_WINDOW = 0.5, 5
INPUT_MEAN_MAX, INPUT_STD_MIN, INPUT_STD_MAX = 0.5, 0.1, 1.0
LOSS_WINDOW, LOSS_MIN_DECREASE = 200, 0.01
OVERTRAINING_EVALS = 3
CLASS_RATIO = 0.25
THRESHOLDS = tuple(name for name in dir() if name.isupper() and name != "THRESHOLDS")


def init_loss(cross_entropy: float, num_classes: int, tolerance: float):
    """The loss of the very first step of a fresh run against ln(num_classes)."""
    expected = math.log(num_classes)
    if abs(cross_entropy - expected) <= tolerance:
        return cross_entropy, None
    return cross_entropy, (
        "%.3f +- %.3g" % (expected, tolerance),
        (
            "the loss at initialisation is %.4f, expected ln(%d) = %.3f for a network that knows nothing: "
            "%s. Check the last layer's initialisation and the labels."
            % (
                cross_entropy,
                num_classes,
                expected,
                "too confident at the start"
                if cross_entropy > expected
                else "below chance before training: the labels may leak into the inputs",
            )
        ),
    )


def vanishing_gradients(names, mean_abs, threshold: float):
    """Smallest mean |gradient of the data loss| over the layers' kernels."""
    i = min(range(len(mean_abs)), key=lambda j: mean_abs[j])
    value = float(mean_abs[i])
    if value >= threshold:
        return value, None
    return value, (
        "< %g" % threshold,
        (
            "vanishing gradients: the mean |gradient| of %s is %.3g (below %g): this layer has stopped "
            "learning. Check the learning rate, initialisation and batch norm." % (names[i], value, threshold)
        ),
    )


def exploding_gradients(norm: float, history, factor: float, min_history: int = 5):
    """Global gradient norm against the median of the previous rule steps'."""
    if len(history) < min_history:
        return None, None
    median = statistics.median(history)
    ratio = norm / median if median > 0 else math.inf
    if ratio <= factor:
        return ratio, None
    return ratio, (
        "> %gx median" % factor,
        (
            "exploding gradients: the global gradient norm is %.4g, %.1fx its running median %.4g. Lower "
            "--learning-rate or add --warmup-epochs." % (norm, ratio, median)
        ),
    )


def update_ratio(names, ratios, low: float, high: float):
    """learning rate x |gradient| / |weights| per layer (the SGD update's relative size).

    All zero is a learning rate of 0 (the first step of a warm-up from 0, as onecycle's): nothing
    moves by design, and nothing is judged (gradients that vanish have their own rule)."""
    if not any(ratios):
        return 0.0, None
    worst = max(range(len(ratios)), key=lambda j: abs(math.log10(max(ratios[j], 1e-30)) + 3))
    value = float(ratios[worst])
    if low <= value <= high:
        return value, None
    return value, (
        "[%g, %g]" % (low, high),
        (
            "update/weight ratio of %s is %.3g, outside [%g, %g] (healthy near 1e-3): %s"
            % (
                names[worst],
                value,
                low,
                high,
                "the learning rate is far too high" if value > high else "this layer barely moves",
            )
        ),
    )


def dead_relus(names, window, fraction: float, size: int):
    """``window``: per rule step, one boolean array per ReLU layer (channel ever positive
    in that batch). A channel is dead when it was never positive over the whole window."""
    if len(window) < size:
        return None, None
    dead = []
    for layer in range(len(names)):
        alive = window[0][layer].copy()
        for batch in window[1:]:
            alive |= batch[layer]
        dead.append(1.0 - float(alive.mean()))
    i = max(range(len(dead)), key=lambda j: dead[j])
    if dead[i] <= fraction:
        return dead[i], None
    return dead[i], (
        "> %g of a layer" % fraction,
        (
            "dead ReLUs: %.0f%% of the channels of %s were never active over the last %d checks. Lower "
            "--learning-rate; check the initialisation." % (100 * dead[i], names[i], size)
        ),
    )


def input_stats(mean: float, std: float, mean_max: float, std_min: float, std_max: float):
    """Mean and std of the batch after the network's own scaling (x / 128 - 1)."""
    if abs(mean) <= mean_max and std_min <= std <= std_max:
        return (mean, std), None
    return (mean, std), (
        "|mean| <= %g, std in [%g, %g]" % (mean_max, std_min, std_max),
        (
            "input statistics: the network sees mean %.3f, std %.3f after its scaling x / 128 - 1 (real "
            "images give about -0.2 to -0.05 and 0.55). Pixels must be 0..255: were they scaled already, or are the "
            "records not images?" % (mean, std)
        ),
    )


def loss_not_decreasing(losses, window: int, min_decrease: float, chance: float = math.inf):
    """Mean training cross-entropy of the last ``window`` steps against the first ``window``
    steps of this process, or against chance (ln 10) when the run started above it: a
    network that only learns the class frequencies falls from its initial excess to
    chance and stays there (measured: shuffled labels, 2.31 -> 2.30). Returns the
    relative decrease."""
    if len(losses) < 2 * window:
        return None, None
    first = min(sum(losses[:window]) / window, chance)
    last = sum(losses[-window:]) / window
    decrease = (first - last) / first if first > 0 else 0.0
    if decrease >= min_decrease:
        return decrease, None
    return decrease, (
        ">= %g relative decrease" % min_decrease,
        (
            "the training loss is not decreasing: %.4f over the last %d steps against %.4f at the start (the "
            "first %d steps, or chance if higher) (%+.1f%%). Check the labels and the learning rate (too low, "
            "or so high it oscillates)." % (last, window, first, window, -100 * decrease)
        ),
    )


def overtraining(history, evaluations: int):
    """``history``: (step, validation loss, training loss) after each evaluation. Fires when
    the validation loss rose over the last ``evaluations`` evaluations while the training
    loss fell."""
    if len(history) < evaluations + 1:
        return None, None
    recent = history[-(evaluations + 1) :]
    val = [h[1] for h in recent]
    train = [h[2] for h in recent]
    value = val[-1] - val[0]
    rising = all(b > a for a, b in zip(val, val[1:]))
    falling = all(b < a for a, b in zip(train, train[1:]))
    if not (rising and falling):
        return value, None
    return value, (
        "%d rises" % evaluations,
        (
            "over-training: the validation loss rose %d evaluations in a row (%.4f -> %.4f, steps %d-%d) "
            "while the training loss fell (%.4f -> %.4f). The best export (export/best) keeps the best "
            "model; consider more weight decay, more augmentation or a shorter schedule."
            % (evaluations, val[0], val[-1], recent[0][0], recent[-1][0], train[0], train[-1])
        ),
    )


def class_accuracy(names, accuracies, ratio: float):
    """The worst class against the mean of the others; quiet until the others are at
    twice chance (early evaluations of any run are lopsided)."""
    i = min(range(len(accuracies)), key=lambda j: accuracies[j])
    others = [a for j, a in enumerate(accuracies) if j != i]
    mean = sum(others) / len(others)
    if mean < 2.0 / len(accuracies):
        return None, None
    value = accuracies[i] / mean
    if value >= ratio:
        return value, None
    return value, (
        "< %g x the others" % ratio,
        (
            "class '%s' has accuracy %.3f against %.3f for the others: check its labels and images in "
            "the training split (preflight prints the label counts)." % (names[i], accuracies[i], mean)
        ),
    )
