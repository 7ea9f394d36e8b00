"""Durations as users write them (``90s``, ``5m``, ``1h30m``, seconds) and as logs print them (``0:04:12``):
``--time-budget``, ``estimator.vertex --timeout``, the progress line, the budget's messages."""

from __future__ import annotations

import argparse
import math
import re

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse(text: str) -> float:
    """Seconds in ``90s``, ``5m``, ``1h30m``, ``1h2m3s`` or plain seconds (``300``, ``12.5``).

    Raises:
      ValueError: naming the text and the forms it takes.
    """
    value = str(text).strip().lower()
    seconds = None
    try:
        seconds = float(value)
    except ValueError:
        match = _DURATION.match(value)
        if match and any(match.groups()):
            h, m, s = (float(g) if g else 0.0 for g in match.groups())
            seconds = 3600 * h + 60 * m + s
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("%r is not a positive duration: use e.g. 90s, 5m, 1h30m or seconds (300)." % text)
    return seconds


def flag(text: str) -> float:
    """``parse`` as an argparse ``type`` (``--time-budget``, ``estimator.vertex --timeout``)."""
    try:
        return parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


flag.__name__ = "duration"  # argparse names the type in its errors: "invalid duration value"


def format_clock(seconds: float) -> str:
    """``H:MM:SS``, rounded to the second (never negative)."""
    seconds = max(0, int(round(seconds)))
    return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)
