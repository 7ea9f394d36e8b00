"""What a study leaves for people: ``trials.csv``, ``study.png``, and ``best.args``: the flags the study was
given with the best trial's parameters, for the final model (a study of this machine's or of Vertex AI's)."""

from __future__ import annotations

import csv
import os
import shlex

import numpy as np

from estimator.reporting import pictures
from estimator.tuning import spec as spec_lib

TRIALS_CSV = "trials.csv"
STUDY_PNG = "study.png"
BEST_ARGS = "best.args"


def write_best_args(path: str, trainer_flags, trial_id: str, values: dict, why: str) -> str:
    """PATH: the flags the study was given (a recipe keeps its own training splits and network), less the data
    and job directories, with trial TRIAL_ID's parameters ``values`` after them; the first line says ``why``
    ("of the study in DIR: accuracy 0.8821 on the validation split")."""
    kept, skip = [], False
    for flag in trainer_flags:
        if skip:
            skip = False
        elif flag in ("--data-dir", "--job-dir"):
            skip = True
        elif not flag.startswith(("--data-dir=", "--job-dir=")):
            kept.append(flag)
    lines = [
        "# The best trial (%s) %s." % (trial_id, why),
        "#   python -m estimator.cifar10_main @%s --data-dir D --job-dir J" % path,
        " ".join(shlex.quote(f) for f in kept),
    ] + ["--%s=%s" % kv for kv in values.items()]
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(line for line in lines if line) + "\n")
    os.replace(path + ".tmp", path)
    return path


def rows(study, study_spec: spec_lib.StudySpec):
    """One dict per trial: id, state, parameters (as the trainer got them), metric, seconds."""
    from optuna.trial import TrialState  # an extra: the cloud's best-args uses this module without it

    out = []
    for t in study.trials:
        if t.state == TrialState.WAITING:  # queued grid points not run yet
            continue
        values = t.user_attrs.get("values", {})
        row = {"trial": t.user_attrs.get("trial_id", str(t.number + 1)), "state": t.state.name}
        for p in study_spec.params:
            row[p.name] = values.get(p.name)
        metric = t.value
        if metric is None and t.intermediate_values:  # pruned: its last report
            metric = t.intermediate_values[max(t.intermediate_values)]
        row[study_spec.metric] = metric
        row["seconds"] = t.user_attrs.get("seconds")
        out.append(row)
    return out


def write_csv(path: str, table) -> None:
    if not table:
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)


def best_trial(study):
    """The best COMPLETE trial, or None."""
    from optuna.trial import TrialState  # an extra, as above

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return None
    return study.best_trial


def plot(path: str, table, study_spec: spec_lib.StudySpec) -> None:
    """The metric against each parameter (log axes for log scales) and the optimisation history."""
    import matplotlib.ticker  # on drawing only: the cloud's best-args imports this module and draws nothing

    metric = study_spec.metric
    scored = [r for r in table if r[metric] is not None]
    panels = len(study_spec.params) + 1
    fig = pictures.figure(figsize=(4.2 * panels, 3.6))
    axes = fig.subplots(1, panels, squeeze=False)
    colours = {"COMPLETE": "tab:blue", "PRUNED": "tab:orange"}
    for ax, p in zip(axes[0], study_spec.params):
        xs = [r[p.name] for r in scored]
        if p.type == spec_lib.ParamType.CATEGORICAL:
            positions = {v: i for i, v in enumerate(p.values)}
            ax.set_xticks(range(len(p.values)), p.values)
            xs = [positions[x] for x in xs]
        elif p.scale == spec_lib.Scale.UNIT_LOG_SCALE:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        elif p.scale == spec_lib.Scale.UNIT_REVERSE_LOG_SCALE:
            # Dense near the top: x = lo + hi - z with z on a log scale, so the axis is
            # -log(lo + hi - x), increasing with x and labelled in x.
            ax.set_xscale(
                "function",
                functions=(
                    lambda x, s=p.min_value + p.max_value: -_safe_log(s - x),
                    lambda y, s=p.min_value + p.max_value: s - 10.0**-y,
                ),
            )
        ax.scatter(xs, [r[metric] for r in scored], c=[colours.get(r["state"], "grey") for r in scored])
        ax.set_xlabel(p.name + ("" if p.scale == spec_lib.Scale.UNIT_LINEAR_SCALE else " (%s)" % p.scale.lower()))
        ax.set_ylabel(metric)
    history = axes[0][-1]
    ids = [int(r["trial"]) for r in scored]
    values = [r[metric] for r in scored]
    history.scatter(ids, values, c=[colours.get(r["state"], "grey") for r in scored])
    best, best_so_far = None, []
    for v in values:
        better = best is None or (v > best if study_spec.goal == spec_lib.Goal.MAXIMIZE else v < best)
        best = v if better else best
        best_so_far.append(best)
    history.step(ids, best_so_far, where="post", color="tab:green", label="best so far")
    history.set_xlabel("trial")
    history.set_ylabel(metric)
    history.set_title("history (orange: pruned)")
    history.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _safe_log(x):
    return np.log10(np.maximum(x, 1e-12))


def write(job_dir: str, study, study_spec: spec_lib.StudySpec) -> dict:
    """Writes trials.csv and study.png into ``job_dir``; returns their paths."""
    table = rows(study, study_spec)
    paths = {"csv": os.path.join(job_dir, TRIALS_CSV), "png": os.path.join(job_dir, STUDY_PNG)}
    write_csv(paths["csv"], table)
    plot(paths["png"], table, study_spec)
    return paths
