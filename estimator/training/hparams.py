"""The one hyperparameter object: ``HParams``, built from the trainer's flags (``estimator.training.flags``).

``HParams`` is the frozen result of the flags, which ``model_fn`` receives as ``params``
and reads nothing else. ``estimator.training.config`` turns a command line and the
environment into an ``HParams`` (the one place that reads the environment);
derived numbers live with their owners (``devices``, ``schedules``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from estimator.common.cluster import Cluster
from estimator.common.options import (
    DataFormat,
    EvalPolicy,
    HealthAction,
    LrScaling,
    LrSchedule,
    Network,
    Precision,
    ResNetVersion,
    VariableStrategy,
)
from estimator.data import records as fmt
from estimator.training import devices, schedules

EVAL_POLICIES = EvalPolicy.values()
AUTO = Precision.AUTO  # --precision auto: chosen by estimator.training.precision
HEALTH_ACTIONS = HealthAction.values()


NONNEGATIVE = "nonnegative"  # a threshold's lower bound: 0 allowed


def _threshold(default, low=None, high=None, help=None):
    """A health-rule threshold: its default, range and help, declared once.

    ``low``/``high`` are exclusive bounds (None: unbounded; ``NONNEGATIVE``: 0
    or more); the parser and ``validate`` both read them from the field's metadata.
    """
    return field(default=default, metadata={"health_threshold": True, "range": (low, high), "help": help})


@dataclass(frozen=True)
class HParams:
    """Resolved hyperparameters of one run; saved as JOB_DIR/hparams.json."""

    data_dir: str
    job_dir: str
    # --recipe: the recipe whose flags the command line starts from (a name, or a file), or None.
    recipe: str = None
    # --probe-cache: where the speed probes keep their measurements (local or gs://); resolved by
    # estimator.training.config to $CIFAR10_CACHE_DIR, else ~/.cache/cifar10-resnet-estimator.
    probe_cache: str = None
    variable_strategy: VariableStrategy = VariableStrategy.CPU
    num_gpus: int = 1
    num_cpu_towers: int = 0
    num_layers: int = 44
    resnet_version: ResNetVersion = ResNetVersion.V1
    # resnet: ResNetCifar10 (num_layers, resnet_version); airbench: airbench94's network
    # (estimator.networks.airbench), which ignores both.
    network: Network = Network.RESNET
    # --network auto: the member of airbench's family chosen for the budget, and why (family.choose's
    # record: the candidates, their estimated speed and epochs, the accuracy the table expects). A
    # restarted job keeps it. None: the network was named.
    network_choice: dict = None
    # The airbench network's 3x3 convolutions per group: 2 (airbench94's) or 3 (airbench96's, a residual
    # around the last two; about 1.36x the FLOPs per image).
    group_depth: int = 2
    train_steps: int = 80000
    train_epochs: float = None
    # Seconds the whole command may take (estimator.training.time_budget plans the steps); None: off.
    time_budget: float = None
    train_batch_size: int = 128
    eval_batch_size: int = 100
    momentum: float = 0.9
    weight_decay: float = 2e-4
    learning_rate: float = 0.1
    lr_schedule: LrSchedule = LrSchedule.PIECEWISE
    lr_decay_steps: tuple = None
    warmup_epochs: float = None
    lr_scaling: LrScaling = LrScaling.NONE
    nesterov: bool = False
    label_smoothing: float = 0.0
    precision: Precision = Precision.FP32
    # --precision auto: images/s of each precision the probe timed ({} where the CPU ruled bf16 out).
    precision_probe: dict = None
    # bf16 training on the CPU: for each kernel shape of a convolution that may pay (ops/filter_gradient.py),
    # the square map sides on which its filter gradient is computed as matrix products, as measured on the
    # first run's CPU ({}: none pays). Resolved once by estimator.training.config and kept by restarts, so
    # that the graph depends on hparams.json alone. None: not bf16 on the CPU.
    filter_gradients: dict = None
    # --time-budget on the CPU: this network's training and evaluation images/s in its precision, and how
    # they were had ("timed", or estimated from the family's reference member): what the budget is planned
    # from. Measured again by a restart on its own CPU.
    speed_probe: dict = None
    # Filters of every layer times this (16, 32, 64 for 1): wider layers may use the CPU's
    # matrix units better per FLOP.
    width_multiplier: float = 1.0
    # Goyal et al. 2017: the last batch norm of each residual unit starts at gamma 0.
    zero_init_residual: bool = False
    # Weights averaged over training, used to evaluate and export (0: off).
    ema_decay: float = 0.0
    # airbench's Lookahead: every 5 steps the weights are pulled towards a slow copy of themselves,
    # harder as training goes on (model_fn.apply_lookahead).
    lookahead: bool = False
    # What training reads: the training split, or (a final model) training and validation splits.
    train_subsets: tuple = ("train",)
    eval_policy: EvalPolicy = EvalPolicy.PERIODIC
    # Flip TTA costs a second forward pass: the final test evaluation pays it with
    # --eval-flip-tta; the validation evaluations during training only with
    # --validation-flip-tta (so hparams.json says which evaluations had it).
    eval_flip_tta: bool = False
    validation_flip_tta: bool = False
    # The final test evaluation also with flips and 1-pixel translations (accuracy_tta).
    eval_tta: bool = False
    export: bool = True
    use_distortion_for_training: bool = True
    # Side in pixels of the square greyed out of each training image after its crop (DeVries &
    # Taylor 2017); 0: none.
    cutout: int = 0
    # Pixels of zero padding around each training image before its random 32x32 crop: shifts of up
    # to that many pixels (4: He et al. 2016).
    crop_padding: int = 4
    # Progressive resizing (schedules.ImageSizes): training images scaled down to this many pixels a
    # side at first, growing to 32 by the fraction progressive_resize_until of training; 0: off.
    progressive_resize: int = 0
    progressive_resize_until: float = schedules.RESIZE_UNTIL
    sync: bool = False
    num_intra_threads: int = 0
    num_inter_threads: int = 0
    data_format: DataFormat = DataFormat.CHANNELS_LAST
    log_device_placement: bool = False
    batch_norm_decay: float = 0.997
    batch_norm_epsilon: float = 1e-5
    seed: int = None
    deterministic: bool = False
    save_checkpoints_steps: int = None
    save_checkpoints_secs: int = 600
    eval_throttle_secs: int = 60
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 100
    ps_wait_secs: int = 300
    verbose: bool = False
    histograms: bool = True
    # Health rules (estimator.health.rules: sources of the defaults there).
    health_checks: HealthAction = HealthAction.WARN
    health_every_n_steps: int = _threshold(100, 0)
    health_init_loss_tolerance: float = _threshold(
        0.25, 0, help="Loss of the first step must be within this of ln(10) = 2.303 (Karpathy 2019)."
    )
    health_vanishing_gradient: float = _threshold(
        1e-7, NONNEGATIVE, help="A layer whose mean |gradient| of the data loss is below this has vanishing gradients."
    )
    health_exploding_factor: float = _threshold(
        10.0, 0, help="The global gradient norm above this multiple of its running median is exploding."
    )
    health_update_ratio_min: float = _threshold(
        1e-8, 0, help="Lowest healthy learning rate x |gradient| / |weights| of a layer (CS231n: ~1e-3)."
    )
    health_update_ratio_max: float = _threshold(10.0, 0)
    health_dead_relu_fraction: float = _threshold(
        0.5, 0, 1, help="More than this fraction of a layer's channels never active is a dead layer."
    )
    health_dead_relu_window: int = _threshold(
        5, 0, help="Checks (batches) over which a channel must never be active to count as dead."
    )
    health_input_mean_max: float = _threshold(
        0.5, 0, help="Largest |mean| of the input after the network's scaling x / 128 - 1."
    )
    health_input_std_min: float = _threshold(0.1, NONNEGATIVE)
    health_input_std_max: float = _threshold(1.0, 0)
    health_loss_window: int = _threshold(
        200, 0, help="Steps averaged to smooth the training loss for the not-decreasing rule."
    )
    health_loss_min_decrease: float = _threshold(
        0.01,
        NONNEGATIVE,
        1,
        help="Relative decrease of the smoothed loss (last window against the first) below "
        "which the loss is not decreasing.",
    )
    health_overtraining_evals: int = _threshold(
        3, 0, help="Evaluations in a row with rising validation loss and falling training loss."
    )
    health_class_ratio: float = _threshold(
        0.25, 0, 1, help="A class whose validation accuracy is below this fraction of the others' mean."
    )
    # Resolved from the environment by estimator.training.config, not flags: where this
    # process stands in the job (TF_CONFIG; its trial), how many processes
    # train, how many training images the data's manifest lists, Vertex
    # AI's TensorBoard directory, which gets a copy of the summaries, and its
    # model directory (AIP_MODEL_DIR), which gets a copy of the final export.
    cluster: Cluster = field(default_factory=Cluster)
    num_workers: int = 1
    num_train_examples: int = 0
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
        for name in ("lr_decay_steps", "train_subsets"):
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

    @property
    def validates(self) -> bool:
        """False when the validation split is training data (``--train-subsets train validation``)."""
        return fmt.VALIDATION not in self.train_subsets


# The HParams fields that hold a choice, and its type.
_CHOICES = {
    "variable_strategy": VariableStrategy,
    "resnet_version": ResNetVersion,
    "network": Network,
    "lr_schedule": LrSchedule,
    "lr_scaling": LrScaling,
    "precision": Precision,
    "eval_policy": EvalPolicy,
    "data_format": DataFormat,
    "health_checks": HealthAction,
}


def health_thresholds():
    """The ``HParams`` fields that are health-rule thresholds, in declaration order."""
    return [f for f in dataclasses.fields(HParams) if f.metadata.get("health_threshold")]


def flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


# Options retired in 0.3.0: experiments that did not pay (docs/experiments.md), taken out of the code.
# Each: its HParams name -> (whether a recorded value left it off, why it went). A job dir whose
# hparams.json records one switched on is refused on restart (resilience.jobdir).
RETIRED = {
    "ensemble": (lambda v, rec: v in (None, 1), "two networks of half the epochs each tied one network at 30 minutes"),
    "bias_lr_scale": (lambda v, rec: v in (None, 1), "airbench's 64x rate of the shifts: +0.06 at 30 minutes, noise"),
    "whiten_eps": (lambda v, rec: v in (None, 5e-4), "ten times airbench's whitening floor cost 0.45 at 30 minutes"),
    "flip": (lambda v, rec: v in (None, "random"), "alternating flips did not beat random ones at 5 or 30 minutes"),
    "activation": (
        lambda v, rec: v in (None, "gelu" if rec.get("network") == Network.AIRBENCH else "relu"),
        "ReLU for the airbench network's GELU cost 0.26 at 30 minutes, and GELU is fused now",
    ),
}


def retired_in(recorded: dict) -> list:
    """``[(flag, value, why)]``: the retired options that ``recorded`` (hparams.json's hyperparameters)
    had switched on, which this version cannot train."""
    return [
        (flag_name(name), recorded[name], why)
        for name, (off, why) in RETIRED.items()
        if name in recorded and not off(recorded[name], recorded)
    ]


def check_schedule(hp: HParams) -> None:
    """Raises ValueError when the warm-up leaves no steps for the schedule itself."""
    warmup = hp.schedule.warmup
    if hp.schedule.by_progress:
        return
    if hp.lr_schedule != LrSchedule.PIECEWISE and warmup >= hp.train_steps:
        raise ValueError(
            "--warmup-epochs %s is %d steps, as long as the whole run (%d steps): the %s schedule "
            "would never decay. Use fewer warm-up epochs or train longer."
            % (hp.warmup_epochs, warmup, hp.train_steps, hp.lr_schedule)
        )
