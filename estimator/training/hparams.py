"""The one hyperparameter object: ``HParams``, each setting declared once, as a field with its flag's help,
group and range (``estimator.training.settings``), from which ``estimator.training.flags`` builds the parser.

``HParams`` is the frozen result of the flags, which ``model_fn`` receives as ``params``
and reads nothing else. ``estimator.training.config`` turns a command line and the
environment into an ``HParams`` (the one place that reads the environment);
derived numbers live with their owners (``devices``, ``schedules``).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import MISSING, dataclass, field

from estimator.common import durations
from estimator.common.cluster import Cluster
from estimator.common.options import (
    GROUP_DEPTHS,
    Choice,
    DataFormat,
    EvalPolicy,
    HealthAction,
    LrScaling,
    LrSchedule,
    Network,
    Optimizer,
    Precision,
    ResNetVersion,
    VariableStrategy,
)
from estimator.data import records as fmt
from estimator.training import devices, recipes, schedules, settings
from estimator.training.settings import NONNEGATIVE, POSITIVE, Range, flag_name, setting

# --optimizer auto: Muon below MUON_BELOW_EPOCHS (at batch 512 it led SGD at 8 epochs and tied at 16), at
# airbench94_muon's own rate below MUON_SHORT_BELOW_EPOCHS, where it led the default's (docs/training.md, "Muon").
MUON_BELOW_EPOCHS = 12.0
MUON_SHORT_RATE, MUON_SHORT_BELOW_EPOCHS = 0.24, 6.0

# The test evaluation's optional views: the mirror image (flip TTA: one more pass), then the 1-pixel
# translations of both (TTA: four more).
FLIP_VIEW, TRANSLATIONS_VIEW = "flip", "translations"


@dataclass(frozen=True)
class HParams:
    """Resolved hyperparameters of one run; saved as JOB_DIR/hparams.json.

    Each setting is one field, declared with its flag's group, help and range (``settings.setting``), in
    the order ``--help`` lists them; the fields after the flags are resolved from the environment or
    measured by ``estimator.training.config``.
    """

    # -- job, data and logs -----------------------------------------------------------------------
    data_dir: str = setting(
        MISSING,
        "job",
        "Directory (or gs:// path) with the TFRecords of generate_cifar10_tfrecords.py. Required.",
        required=True,
        flag_default=None,
    )
    job_dir: str = setting(
        MISSING,
        "job",
        "Directory (or gs://) for checkpoints, exports, results. Required, except on Vertex AI: $AIP_CHECKPOINT_DIR.",
        flag_default=None,
    )
    recipe: str = setting(
        None,
        "job",
        "Flags of a recipe (%s) or of a flag file, in place; later flags override them." % ", ".join(recipes.names()),
        metavar="NAME",
        default_text="none",
    )
    probe_cache: str = setting(
        None,
        "job",
        "Where the speed probes keep their measurements (local or gs://): jobs that name one share it.",
        default_text="$CIFAR10_CACHE_DIR, else ~/.cache/cifar10-resnet-estimator",
    )
    train_subsets: tuple = setting(
        (fmt.TRAIN,),
        "job",
        "What training reads; 'train validation' trains a final model (no validation, tuning or best export).",
        item=str,
        choices=(fmt.TRAIN, fmt.VALIDATION),
        metavar="SUBSET",
    )
    seed: int = setting(
        None, "job", "Fixes initialisation, shuffling and distortion.", default_text="a new draw each run"
    )
    deterministic: bool = setting(False, "job", "Deterministic ops (with --seed: identical runs on the CPU).")
    log_every_n_steps: int = setting(
        100, "job", "Log loss, learning rate, accuracy and examples/sec every N steps.", range=POSITIVE
    )
    verbose: bool = setting(False, "job", "Also show TensorFlow's notices and the Estimator's bookkeeping lines.")
    histograms: bool = setting(True, "job", "Weight and gradient histograms of each layer in TensorBoard.")
    save_summary_steps: int = setting(
        None,
        "job",
        "Write TensorBoard's training scalars, histograms and pictures every N steps.",
        range=POSITIVE,
        default_text="100, or --log-every-n-steps if fewer",
    )

    # -- network ----------------------------------------------------------------------------------
    network: Network = setting(
        Network.RESNET,
        "network",
        "resnet (He et al.), airbench (Jordan's airbench94) or auto: the member of its family a budget fits.",
        shapes=True,
    )
    num_layers: int = setting(44, "network", "ResNet depth, 6n+2: 20, 32, 44, 56, 110 ...", shapes=True)
    resnet_version: ResNetVersion = setting(
        ResNetVersion.V1,
        "network",
        "Residual unit: v1 (post-activation), v2 (pre-activation), bottleneck_v2 (9n+2).",
        shapes=True,
    )
    group_depth: int = setting(
        2,
        "network",
        "--network airbench: 3x3 convolutions per group: 2 (airbench94) or 3 (airbench96, 1.36x the FLOPs).",
        choices=GROUP_DEPTHS,
        shapes=True,
    )
    width_multiplier: float = setting(
        1.0,
        "network",
        "Filters of every layer times this (at 1: ResNet 16, 32, 64; airbench 64, 256, 256).",
        # The ResNets' option-A shortcut pads half the new channels on each side: 16 x it even.
        range=Range(0, low_open=True, step=1 / 8, example="0.5, 1, 1.5, 2"),
        shapes=True,
    )
    group_widths: tuple = setting(
        None,
        "network",
        "--network airbench: the filters of each of its three groups, e.g. 32 192 192, for --width-multiplier's.",
        item=int,
        metavar="N",
        default_text="64 256 256 x --width-multiplier",
        shapes=True,
    )
    batch_norm_decay: float = setting(
        0.997,
        "network",
        "Decay of the batch-norm moving averages (0.9 for runs of a few hundred steps).",
        range=Range(0, 1, low_open=True, high_open=True, example="0.997"),
    )
    batch_norm_epsilon: float = setting(
        1e-5, "network", "Added to the batch variance before its square root.", range=POSITIVE
    )

    # -- optimisation and schedule ----------------------------------------------------------------
    train_steps: int = setting(
        80000,
        "optimisation",
        "Global steps to train to (a restarted job resumes towards it).",
        range=POSITIVE,
        # None on the command line: --train-epochs and --time-budget refuse it only when given.
        flag_default=None,
    )
    train_epochs: float = setting(
        None,
        "optimisation",
        "Passes over the training set, instead of --train-steps (rounded up to whole steps).",
        range=POSITIVE,
        default_text="off",
    )
    train_batch_size: int = setting(
        128, "optimisation", "Images per step on each worker, split over its towers.", range=POSITIVE
    )
    learning_rate: float = setting(
        0.1,
        "optimisation",
        "Peak rate (per %d images with --lr-scaling linear)." % schedules.REFERENCE_BATCH,
        range=POSITIVE,
    )
    lr_schedule: LrSchedule = setting(
        LrSchedule.PIECEWISE,
        "optimisation",
        "piecewise: x0.1, x0.01, x0.002 after epochs 82, 123, 300; cosine: to 0; onecycle: up, then to 0.",
    )
    lr_decay_steps: tuple = setting(
        None,
        "optimisation",
        "piecewise only: divide the rate by 10 after each of these global steps (He et al.: 32000 48000).",
        item=int,
        metavar="STEP",
        default_text="after epochs 82, 123, 300",
    )
    warmup_epochs: float = setting(
        None,
        "optimisation",
        "Linear warm-up to the peak rate over these epochs.",
        range=NONNEGATIVE,
        default_text="0; onecycle: the first 20% of training",
    )
    lr_scaling: LrScaling = setting(
        LrScaling.NONE,
        "optimisation",
        "linear: multiply --learning-rate by global batch / %d (Goyal et al. 2017)." % schedules.REFERENCE_BATCH,
    )
    optimizer: Optimizer = setting(
        Optimizer.SGD,
        "optimisation",
        "sgd (momentum), muon (Muon for the filters, SGD for the rest), or auto: muon for short budgets.",
    )
    muon_learning_rate: float = setting(
        0.12,
        "optimisation",
        "--optimizer muon: the filters' rate, decaying linearly to 0 (0.24 is airbench's, for batch 2000).",
        range=POSITIVE,
    )
    muon_momentum: float = setting(
        0.6, "optimisation", "--optimizer muon: the filters' Nesterov momentum.", range=Range(0, 1, high_open=True)
    )
    momentum: float = setting(0.9, "optimisation", "Momentum of SGD.", range=Range(0, 1, high_open=True))
    nesterov: bool = setting(False, "optimisation", "Nesterov momentum.")
    weight_decay: float = setting(
        2e-4, "optimisation", "L2 penalty on every weight, added to the loss.", range=NONNEGATIVE
    )
    label_smoothing: float = setting(
        0.0,
        "optimisation",
        "Training targets (1 - e) one-hot + e/10 (Szegedy et al. 2016); evaluation reports plain xent.",
        range=Range(0, 1, high_open=True, example="0.1"),
    )
    lookahead: bool = setting(
        False,
        "optimisation",
        "airbench's Lookahead (Zhang et al. 2019): weights pulled towards a slow copy every 5 steps.",
    )

    # -- time budget and precision ----------------------------------------------------------------
    time_budget: float = setting(
        None,
        "budget",
        "The whole command ends within this (90s, 5m, 1h30m): steps planned from measured speed.",
        parse=durations.flag,
        metavar="DURATION",
        default_text="off",
    )
    precision: Precision = setting(
        Precision.FP32,
        "budget",
        "fp32, bf16 (AVX512-BF16/AMX CPUs, recent GPUs), fp16 (GPUs), or auto: the faster on this CPU.",
    )

    # -- augmentation -----------------------------------------------------------------------------
    use_distortion_for_training: bool = setting(True, "augmentation", "Pad, randomly crop and flip training images.")
    crop_padding: int = setting(
        fmt.CROP_PADDING,
        "augmentation",
        "Zero pixels padded on each side before the random 32x32 crop (4: He et al. 2016; 0: flips only).",
        range=Range(0, fmt.MAX_CROP_PADDING, unit="pixels", example="4 (He et al. 2016) or 2"),
    )
    cutout: int = setting(
        0,
        "augmentation",
        "Grey out a square this many pixels a side in each training image (DeVries & Taylor 2017); 0: none.",
        range=Range(0, fmt.HEIGHT, unit="pixels", what="a square side", example="8"),
    )
    progressive_resize: int = setting(
        0, "augmentation", "Train first on images this many pixels a side (16 to 31), growing to 32; 0: off."
    )
    progressive_resize_until: float = setting(
        schedules.RESIZE_UNTIL,
        "augmentation",
        "With --progressive-resize: the fraction of training from which images are full size.",
        range=Range(0, 1, low_open=True, what="a fraction of training", example="%g" % schedules.RESIZE_UNTIL),
    )

    # -- evaluation, checkpoints and export -------------------------------------------------------
    eval_policy: EvalPolicy = setting(
        EvalPolicy.PERIODIC,
        "evaluation",
        "periodic: evaluate the validation split after each checkpoint; final: once, after training.",
    )
    eval_batch_size: int = setting(
        100, "evaluation", "Images per evaluation step, split over the towers.", range=POSITIVE
    )
    # Flip TTA costs a second forward pass: hparams.json says which evaluations paid it.
    eval_flip_tta: bool = setting(
        False, "evaluation", "Also report the test accuracy with flip test-time augmentation (accuracy_flip_tta)."
    )
    eval_tta: bool = setting(
        False, "evaluation", "Also report the test accuracy with flips and 1-pixel translations (accuracy_tta)."
    )
    tta_fraction: float = setting(
        1.0,
        "evaluation",
        "Run the test-time views only on this fraction of each batch: its least confident images.",
        range=Range(0, 1, low_open=True, what="a fraction of each batch", example="0.25"),
    )
    validation_flip_tta: bool = setting(
        False, "evaluation", "Flip TTA in the validation evaluations during training too (a second forward pass each)."
    )
    save_checkpoints_secs: int = setting(
        600, "evaluation", "Checkpoint (and with --eval-policy periodic, evaluate) every this many seconds."
    )
    save_checkpoints_steps: int = setting(
        None,
        "evaluation",
        "Checkpoint every N steps instead of every --save-checkpoints-secs.",
        range=POSITIVE,
        default_text="off",
    )
    keep_checkpoint_max: int = setting(5, "evaluation", "Checkpoints kept; older ones are deleted.", range=POSITIVE)
    eval_throttle_secs: int = setting(60, "evaluation", "Do not evaluate more often than this.")
    export: bool = setting(
        True,
        "evaluation",
        "Export SavedModels: the best by validation (JOB_DIR/export/best) and the last (export/final).",
    )

    # -- health rules (estimator.health.rules: the sources of the defaults there) ------------------
    health_checks: HealthAction = setting(
        HealthAction.WARN,
        "health",
        "What the rules do when they fire: off (not computed), warn, or stop training (exit status 4).",
    )
    health_every_n_steps: int = setting(
        100, "health", "Steps between two checks of the rules in the graph.", range=POSITIVE
    )

    # -- cluster and devices ----------------------------------------------------------------------
    num_gpus: int = setting(1, "cluster", "GPUs to use, one tower each; 0 trains on the CPU.", range=NONNEGATIVE)
    num_cpu_towers: int = setting(
        0,
        "testing",
        "With --num-gpus 0: N towers on N CPU devices (tests the multi-GPU logic; no speed-up).",
        range=NONNEGATIVE,
    )
    variable_strategy: VariableStrategy = setting(
        VariableStrategy.CPU,
        "cluster",
        "Where variables live: CPU (a parameter-server layout) or spread over the GPUs.",
    )
    data_format: DataFormat = setting(
        DataFormat.CHANNELS_LAST,
        "cluster",
        "Layout inside the model.",
        flag_default=None,
        default_text="channels_first on GPUs, channels_last on CPUs",
    )
    num_intra_threads: int = setting(
        0, "cluster", "Threads inside one op; 0 lets TensorFlow choose.", range=NONNEGATIVE
    )
    num_inter_threads: int = setting(0, "cluster", "Ops run in parallel; 0 lets TensorFlow choose.", range=NONNEGATIVE)
    sync: bool = setting(
        False, "cluster", "Synchronous distributed training (one update from all workers; a TF_CONFIG cluster only)."
    )
    ps_wait_secs: int = setting(
        300, "cluster", "In a cluster, how long to wait for the parameter servers to answer before failing."
    )
    log_device_placement: bool = setting(False, "cluster", "Log the device of every op (long).")

    # -- resolved from the environment or measured by estimator.training.config, never flags --------
    # --network auto: the member of airbench's family chosen for the budget, and why (family.choose's
    # record: the candidates, their estimated speed and epochs, the accuracy the table expects). A
    # restarted job keeps it. None: the network was named.
    network_choice: dict = None
    # --optimizer auto: the epochs this network was expected to train in the budget, and the optimizer they chose
    # (a restart keeps it: the checkpoint's slots are that optimizer's). None: the optimizer was named.
    optimizer_choice: dict = None
    # --precision auto: images/s of each precision the probe timed ({} where the CPU ruled bf16 out).
    precision_probe: dict = None
    # bf16 training on the CPU: for each kernel shape of a convolution that may pay (ops/filter_gradient.py),
    # the square map sides on which its filter gradient is computed as matrix products, as measured on the
    # first run's CPU ({}: none pays). Kept by restarts, so that the graph depends on hparams.json alone.
    # None: not bf16 on the CPU.
    filter_gradients: dict = None
    # --time-budget on the CPU: this network's training and evaluation images/s in its precision, and how
    # they were had ("timed", or estimated from the family's reference member): what the budget is planned
    # from. Measured again by a restart on its own CPU.
    speed_probe: dict = None
    # Where this process stands in the job (TF_CONFIG; its trial), how many processes train, how many
    # training images the data's manifest lists, Vertex AI's TensorBoard directory (a copy of the
    # summaries) and model directory (AIP_MODEL_DIR: a copy of the final export).
    cluster: Cluster = field(default_factory=Cluster)
    num_workers: int = 1
    num_train_examples: int = 0
    # The images of the splits evaluated after training ({"eval": test, "validation": ...}), read once.
    eval_examples: dict = None
    tensorboard_dir: str = None
    model_export_dir: str = None

    def __post_init__(self):
        # Flags and hparams.json give the choices as strings: held as their enums (equal to the strings).
        for name, choice in _CHOICES.items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, choice):
                object.__setattr__(self, name, choice(value))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> HParams:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values: dict) -> HParams:
        """The inverse of ``to_dict`` (hparams.json); unknown keys (a newer package's) are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in values.items() if k in known}
        if isinstance(values.get("cluster"), dict):
            values["cluster"] = Cluster(**values["cluster"])
        for name in ("lr_decay_steps", "train_subsets", "group_widths"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)

    @property
    def towers(self):
        """The devices that each run one tower (``devices.tower_devices``)."""
        return devices.tower_devices(self.num_gpus, self.num_cpu_towers)

    @property
    def global_batch_size(self) -> int:
        """Training images behind one global step."""
        return schedules.examples_per_step(self.train_batch_size, self.num_workers, self.sync)

    @property
    def schedule(self) -> schedules.Schedule:
        """The learning-rate schedule these hyperparameters resolve to."""
        return schedules.Schedule.resolve(
            self.lr_schedule,
            self.learning_rate,
            self.lr_scaling,
            self.train_steps,
            self.warmup_epochs,
            self.lr_decay_steps,
            self.num_train_examples,
            self.global_batch_size,
            by_progress=self.time_budget is not None,
        )

    @property
    def image_sizes(self):
        """The sides training images have as training goes on (``schedules.ImageSizes``), or None:
        always full size."""
        if not self.progressive_resize:
            return None
        return schedules.ImageSizes(self.progressive_resize, self.progressive_resize_until, fmt.HEIGHT)

    @property
    def validation_hparams(self) -> HParams:
        """What the Estimator that trains and runs the validation evaluations gets: the same
        hyperparameters with flip TTA as ``validation_flip_tta`` says."""
        return self.replace(eval_flip_tta=self.validation_flip_tta, eval_tta=False)

    def evaluation_images(self):
        """What the evaluations after training see, each view counted: ``(images always evaluated,
        [(optional view, images)])``, from the split sizes the configuration resolved (``eval_examples``).
        The optional views are the test evaluation's TTA ones asked for, in the order a time budget keeps them."""
        test, viewed = self.eval_examples[fmt.TEST], lambda n: math.ceil(self.tta_fraction * n)
        always = test
        if self.validates:
            validation = self.eval_examples[fmt.VALIDATION]
            always += validation + int(self.validation_flip_tta) * viewed(validation)
        views = []
        if self.eval_flip_tta or self.eval_tta:
            views.append((FLIP_VIEW, viewed(test)))
        if self.eval_tta:
            views.append((TRANSLATIONS_VIEW, 4 * viewed(test)))
        return always, views

    def with_test_views(self, views) -> HParams:
        """These hyperparameters for the test evaluation with only ``views`` of its optional ones."""
        return self.replace(
            eval_flip_tta=self.eval_flip_tta and FLIP_VIEW in views,
            eval_tta=self.eval_tta and TRANSLATIONS_VIEW in views,
        )

    @property
    def validates(self) -> bool:
        """False when the validation split is training data (``--train-subsets train validation``)."""
        return fmt.VALIDATION not in self.train_subsets


# The HParams fields that hold a choice, and its type (an enum of estimator.common.options).
_CHOICES = {f.name: kind for f, _, kind in settings.declared(HParams) if issubclass(kind, Choice)}


class Retired(typing.NamedTuple):
    """An option taken out of the code: the value that left it off (a function of hparams.json's record where
    that depends on it; None is off too), why it went, and when."""

    off: object
    why: str
    version: str
    docs: str = "docs/experiments.md"

    def was_on(self, value, recorded: dict) -> bool:
        return value not in (None, self.off(recorded) if callable(self.off) else self.off)


# Experiments that did not pay (docs/experiments.md), taken out of the code. A flag of one is refused
# with one line; a job dir whose hparams.json records one switched on is refused on restart
# (resilience.jobdir) and by export and predict (config.load).
RETIRED = {
    "ensemble": Retired(1, "two networks of half the epochs each tied one network at 30 minutes", "0.3.0"),
    "bias_lr_scale": Retired(1, "airbench's 64x rate of the shifts: +0.06 at 30 minutes, noise", "0.3.0"),
    "whiten_eps": Retired(5e-4, "ten times airbench's whitening floor cost 0.45 at 30 minutes", "0.3.0"),
    "flip": Retired("random", "alternating flips did not beat random ones at 5 or 30 minutes", "0.3.0"),
    "activation": Retired(
        lambda rec: "gelu" if rec.get("network") == Network.AIRBENCH else "relu",
        "ReLU for the airbench network's GELU cost 0.26 at 30 minutes, and GELU is fused now",
        "0.3.0",
    ),
    "ema_decay": Retired(
        0, "an average of the weights cost 0.30 points at 5 minutes (ResNet-14) and 0.73 at 30 (ResNet-14 x2)", "0.4.0"
    ),
    "zero_init_residual": Retired(
        False, "zero-initialised residual units cost 3.09 points at 5 minutes (ResNet-14)", "0.4.0"
    ),
}


# The health rules' thresholds, flags until 0.4.0 with these defaults (--health-loss-window 200).
_THRESHOLDS_040 = dict(
    init_loss_tolerance=0.25, vanishing_gradient=1e-7, exploding_factor=10.0, update_ratio_min=1e-8,
    update_ratio_max=10.0, dead_relu_fraction=0.5, dead_relu_window=5, input_mean_max=0.5, input_std_min=0.1,
    input_std_max=1.0, loss_window=200, loss_min_decrease=0.01, overtraining_evals=3, class_ratio=0.25,
)  # fmt: skip
_THRESHOLDS_WHY = "the health rules' thresholds are constants behind --health-checks"
RETIRED.update(
    {"health_" + k: Retired(v, _THRESHOLDS_WHY, "0.5.0", "docs/health.md") for k, v in _THRESHOLDS_040.items()}
)


def retired_in(recorded: dict) -> list:
    """``[(flag, value, why, version)]``: the retired options that ``recorded`` (hparams.json's
    hyperparameters) had switched on, which this version cannot train, export or serve."""
    return [
        (flag_name(name), recorded[name], retired.why, retired.version)
        for name, retired in RETIRED.items()
        if name in recorded and retired.was_on(recorded[name], recorded)
    ]


def refuse_retired(job_dir: str, recorded: dict, doing: str) -> None:
    """Raises ValueError, one line, when ``recorded`` had a retired option on."""
    retired = retired_in(recorded)
    if retired:
        options = " and ".join("%s %s (retired in %s: %s)" % (f, v, version, why) for f, v, why, version in retired)
        raise ValueError(
            "%s was trained with %s: this version cannot %s it. Use another --job-dir." % (job_dir, options, doing)
        )


def check_schedule(hp: HParams) -> None:
    """Raises ValueError when the warm-up leaves no steps for the schedule itself."""
    warmup = hp.schedule.warmup
    if hp.schedule.by_progress:
        return
    if hp.lr_schedule != LrSchedule.PIECEWISE and warmup >= hp.train_steps:
        if hp.warmup_epochs is None:  # the schedule's own warm-up: onecycle's first step at least
            length = "The run is %d step(s) and the %s schedule warms up over its first %d" % (
                hp.train_steps,
                hp.lr_schedule,
                warmup,
            )
            raise ValueError("%s: it would never decay. Train for at least %d steps." % (length, warmup + 1))
        length = "--warmup-epochs %s is %d steps, as long as the whole run (%d steps)" % (
            hp.warmup_epochs,
            warmup,
            hp.train_steps,
        )
        raise ValueError("%s: the schedule would never decay. Use fewer or train longer." % length)
