"""``ldpstream watch``: a live terminal view of a metric's latest published estimate."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldpstream.store.contract import EstimateStore

_BAR_WIDTH = 30


def render(published: Mapping[str, Any], truth: Sequence[float] | np.ndarray | None = None, top: int = 20,
           now: float | None = None) -> str:
    """A table of the top values: frequency, 95% interval, design effect, a bar, and the true frequency when
    known; above it how the intervals are made (``interval_method``, the largest design effect) and what they
    assume about repeated reports (``interval_assumes``), as published (:mod:`ldpstream.decoder.published`)."""
    now = time.time() if now is None else now
    values = list(published["values"])
    order = sorted(range(len(values)), key=lambda i: -values[i]["frequency"])[:top]
    age = now - float(published["snapshot_time"])
    lines = [
        f"metric {published['metric']}  window {published['window']}  method {published['method']}  "
        f"reports {published['n_reports']:,}  snapshot {age:.1f} s ago",
    ]
    interval_method = published.get("interval_method")
    if interval_method is not None:
        deff = published.get("design_effect")
        how = f"intervals: {interval_method}"
        if deff is not None:
            how += f", widened by design effects up to {float(deff):.2f}"
        repetition = published.get("repetition")
        if isinstance(repetition, Mapping) and repetition.get("rule"):
            how += f" (repetition rule {repetition['rule']}, overlap {float(repetition.get('overlap', 0.0)):.2f})"
        lines.append(how)
    if published.get("interval_assumes"):
        lines.append(f"assumes: {published['interval_assumes']}")
    with_deff = any("design_effect" in values[i] for i in order)
    header = f"{'value':<24} {'estimate':>9} {'95% interval':>21}"
    if with_deff:
        header += f" {'deff':>5}"
    if truth is not None:
        header += f" {'truth':>8}"
    lines.append(header)
    scale = max((values[i]["frequency"] for i in order), default=0.0) or 1.0
    for i in order:
        entry = values[i]
        freq = entry["frequency"]
        interval = (f"[{entry['low_95']:8.4f}, {entry['high_95']:8.4f}]" if "low_95" in entry else " " * 21)
        bar = "#" * max(round(_BAR_WIDTH * max(freq, 0.0) / scale), 0)
        line = f"{str(entry['value'])[:24]:<24} {freq:9.4f} {interval:>21}"
        if with_deff:
            line += f" {entry['design_effect']:5.2f}" if "design_effect" in entry else " " * 6
        if truth is not None:
            line += f" {truth[i]:8.4f}"
        lines.append(f"{line}  {bar}")
    if published.get("residual") is not None:
        lines.append(f"unexplained mass (outside the candidates): {published['residual']:.4f}")
    return "\n".join(lines)


def watch(store: EstimateStore, metric: str, window: str = "all", interval: float = 1.0,
          top: int = 20, iterations: int | None = None) -> None:
    done = 0
    while iterations is None or done < iterations:
        published = store.latest_estimate(metric, window)
        text = render(published, top=top) if published else f"no estimate of {metric!r} ({window}) published yet"
        # Clear the screen only on a terminal: piped or captured output gets plain text.
        clear = "\x1b[2J\x1b[H" if sys.stdout.isatty() else ""
        sys.stdout.write(clear + text + "\n")
        sys.stdout.flush()
        done += 1
        if iterations is None or done < iterations:
            time.sleep(interval)
