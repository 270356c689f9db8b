"""How the dashboard writes numbers: losses, durations, sizes, rates, times and progress bars.

Plain functions of plain values (no Textual), so every screen writes a figure the same way.
"""

from __future__ import annotations

import math
import time

DASH = "–"


def fmt_loss(value: float | None) -> str:
    if value is None:
        return DASH
    if not math.isfinite(value):
        return str(value)
    # A GRPO objective is near 0 from either side: -1e-9 reads as 0.0000, not -0.0000.
    text = f"{value:.4f}"
    return "0.0000" if text == "-0.0000" else text


def fmt_reward(value: float | None) -> str:
    """A grpo run's mean reward where a loss would be (runs lists), marked as a reward:
    `r 0.62`, `r -0.2`, `r 12.5`; six characters, as a loss's `0.8788`."""
    if value is None:
        return DASH
    if not math.isfinite(value):
        return f"r {value}"
    for digits in (2, 1, 0):
        text = f"{value:.{digits}f}"
        if len(text) <= 4:
            break
    return f"r {text}"


def fmt_number(value: float | None) -> str:
    """Four significant figures, without an exponent for everyday magnitudes."""
    if value is None:
        return DASH
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10_000 or magnitude < 0.001:
        return f"{value:.3g}"
    return f"{value:.4g}"


def fmt_rate(value: float | None, unit: str = "") -> str:
    if value is None:
        return DASH
    if value >= 10_000:
        text = f"{value / 1000:.0f}k"
    elif value >= 100:
        text = f"{value:.0f}"
    else:
        text = f"{value:.1f}"
    return f"{text}{unit}"


def fmt_bytes(value: float | None) -> str:
    """A size in binary units, one decimal (`417.2 KiB`, `12.8 MiB`, `3.0 GiB`), whole bytes
    below 1 KiB: the one way the CLI, the dashboard and the memory verdicts write sizes."""
    if value is None:
        return DASH
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def fmt_duration(seconds: float | None) -> str:
    """Short and fixed-width-friendly: 42s, 3m07s, 2h05m, 3d04h."""
    if seconds is None or not math.isfinite(seconds):
        return DASH
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def fmt_clock(timestamp: float | None) -> str:
    """A time of day in the local time zone (the zone of the machine the dashboard runs on)."""
    if timestamp is None:
        return DASH
    return time.strftime("%H:%M:%S", time.localtime(timestamp))


def fmt_datetime(timestamp: float | None) -> str:
    if timestamp is None:
        return DASH
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


BAR_FULL = "█"
BAR_PARTS = " ▏▎▍▌▋▊▉"
BAR_EMPTY = "░"


def progress_bar(fraction: float | None, width: int) -> tuple[str, str]:
    """The filled and empty parts of a bar `width` cells wide, in eighths of a cell."""
    if fraction is None or width <= 0:
        return "", BAR_EMPTY * max(0, width)
    fraction = min(1.0, max(0.0, fraction))
    eighths = int(round(fraction * width * 8))
    full, part = divmod(eighths, 8)
    filled = BAR_FULL * full + (BAR_PARTS[part] if part and full < width else "")
    return filled, BAR_EMPTY * (width - len(filled))


def basename(path: str) -> str:
    """The last part of a path, for narrow columns; the full path stays in the run record."""
    stripped = path.rstrip("/")
    return stripped.rsplit("/", 1)[-1] or path
