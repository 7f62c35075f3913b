"""``ldpstream report``: a metric's published estimates as a figure (PNG or SVG, matplotlib); the same figure
for ``ldpstream simulate --plot`` and ``ldpstream tune --plot``.

A metric's figure has three panels:

1. the latest estimate of the top values as bars with their 95% interval whiskers, and the true frequencies
   as markers when a simulation published them (marked "truth (simulation)");
2. against the number of reports n (log-log, from the published history): the mean width of the top values'
   95% intervals, with a reference line ∝ 1/√n through the latest point (an estimator's standard error
   shrinks as 1/√n: Kairouz, Bonawitz, Ramage 2016, §2), and, with a truth, the largest error
   max_v |p̂_v − p_v| of each estimate;
3. the top values' estimates and their intervals over time (or over n, for a simulation).

An association's figure shows the latest joint table as a heat map, each cell with its estimate and 95%
interval (marked "?" where the cell is not identified, the reasons below the table, as ``ldpstream watch``
and the web view mark them), the independence test in the title, and the mean cell interval width against n
from the joint history.

The inputs are what the decoder publishes (:mod:`ldpstream.decoder.published`: ``values`` with
``frequency``, ``low_95``, ``high_95``; ``n_reports``; ``snapshot_time``), so a figure needs no Redis: the
command reads them, a simulation builds them (:func:`published_form`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.decoder.watch import fit_line
from ldpstream.errors import ParameterError

FORMATS = (".png", ".svg")
TRUTH_LABEL = "truth (simulation)"
#: What a "?" on a joint cell means (the words of ldpstream watch).
UNIDENTIFIED_NOTE = "? not identified, the interval is no promise"


def check_output(path: str | Path) -> Path:
    """The figure's path, refused unless it ends in .png or .svg (the format follows the suffix)."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise ParameterError(f"the figure must be a .png or .svg file, got {str(path)!r}")
    return out


def published_form(frequencies: np.ndarray, low: np.ndarray | None, high: np.ndarray | None, names: Sequence[str],
                   n_reports: int, snapshot_time: float = 0.0, metric: str = "", window: str = "all"
                   ) -> dict[str, Any]:
    """An estimate in the form the decoder publishes, for :func:`plot_metric` (simulations build these)."""
    values: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        entry: dict[str, Any] = {"value": str(name), "frequency": float(frequencies[i])}
        if low is not None and high is not None:
            entry["low_95"], entry["high_95"] = float(low[i]), float(high[i])
        values.append(entry)
    return {"metric": metric, "window": window, "n_reports": int(n_reports), "snapshot_time": snapshot_time,
            "values": values}


def _columns(published: Mapping[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray | None, np.ndarray | None]:
    values = list(published["values"])
    names = [str(v["value"]) for v in values]
    freq = np.array([float(v["frequency"]) for v in values])
    if values and all("low_95" in v and "high_95" in v for v in values):
        return (names, freq, np.array([float(v["low_95"]) for v in values]),
                np.array([float(v["high_95"]) for v in values]))
    return names, freq, None, None


def error_and_width(history: Sequence[Mapping[str, Any]], truth: Mapping[str, float] | None, top: Sequence[str]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per published estimate (oldest first, one per distinct n): n, the mean 95% interval width over the
    values ``top``, and with a truth the largest absolute error over every value it names.

    >>> h = [{"n_reports": 100, "values": [{"value": "a", "frequency": 0.6, "low_95": 0.5, "high_95": 0.7}]}]
    >>> n, width, error = error_and_width(h, {"a": 0.55}, ["a"])
    >>> n.tolist(), width.round(6).tolist(), error.round(6).tolist()
    ([100.0], [0.2], [0.05])
    """
    seen: dict[int, Mapping[str, Any]] = {}
    for entry in history:  # newest first, as published: the newest of each n wins
        seen.setdefault(int(entry["n_reports"]), entry)
    ns, widths, errors = [], [], []
    for n in sorted(seen):
        if n <= 0:
            continue
        names, freq, low, high = _columns(seen[n])
        chosen = [i for i, name in enumerate(names) if name in set(top)]
        if low is None or high is None or not chosen:
            continue
        ns.append(n)
        widths.append(float(np.mean(high[chosen] - low[chosen])))
        if truth is not None:
            true = np.array([truth.get(name, 0.0) for name in names])
            errors.append(float(np.max(np.abs(freq - true))))
    return (np.asarray(ns, dtype=np.float64), np.asarray(widths),
            np.asarray(errors) if truth is not None else None)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: smaller, searchable
    import matplotlib.pyplot as plt

    return plt


def plot_metric(out: str | Path, latest: Mapping[str, Any], history: Sequence[Mapping[str, Any]],
                truth: Mapping[str, float] | None = None, *, top: int = 20, title: str | None = None,
                over: str = "time") -> Path:
    """Write a metric's figure (the module docstring) to ``out`` (.png or .svg). ``history``: the published
    estimates, newest first (the latest included or not); ``truth``: value name → true frequency;
    ``over``: ``"time"`` (``snapshot_time``, live) or ``"n"`` (a simulation) as panel 3's axis."""
    path = check_output(out)
    plt = _pyplot()
    names, freq, low, high = _columns(latest)
    order = np.argsort(-freq, kind="stable")[:top]
    shown = [names[i] for i in order]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2), constrained_layout=True)
    fit = latest.get("fit")
    fig.suptitle((title or f"{latest.get('metric', '')} ({latest.get('window', 'all')}): "
                  f"{int(latest['n_reports']):,} reports") + (f"\n{fit_line(fit)}" if isinstance(fit, Mapping) else ""))

    ax = axes[0]
    x = np.arange(len(order))
    if low is not None and high is not None:
        below = np.clip(freq[order] - low[order], 0, None)
        above = np.clip(high[order] - freq[order], 0, None)
        ax.bar(x, freq[order], yerr=np.vstack([below, above]), capsize=3, color="#4c72b0",
               label="estimate, 95% interval")
    else:
        ax.bar(x, freq[order], color="#4c72b0", label="estimate")
    if truth is not None:
        ax.plot(x, [truth.get(name, 0.0) for name in shown], "D", color="black", markersize=5, label=TRUTH_LABEL)
    ax.set_xticks(x, [name[:16] for name in shown], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("frequency")
    ax.set_title(f"top {len(order)} values")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.legend(fontsize=8)

    ax = axes[1]
    ns, widths, errors = error_and_width([latest, *history], truth, shown)
    if ns.size:
        ax.loglog(ns, widths, "o-", label="mean 95% interval width (top values)")
        reference = widths[-1] * np.sqrt(ns[-1] / ns)
        ax.loglog(ns, reference, ":", color="grey", label="∝ 1/√n")
        if errors is not None and np.all(errors > 0):
            ax.loglog(ns, errors, "s-", label="largest error |p̂ − p| vs truth")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no history with intervals", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("reports n")
    ax.set_title("error and interval width against n")

    ax = axes[2]
    entries = sorted({int(e["n_reports"]) if over == "n" else float(e["snapshot_time"]): e
                      for e in [*reversed(history), latest]}.items())
    xs: list[Any] = [dt.datetime.fromtimestamp(k, dt.UTC) if over == "time" else k for k, _ in entries]
    for name in shown[:5]:
        series = []
        for _, entry in entries:
            by_name = {str(v["value"]): v for v in entry["values"]}
            v = by_name.get(name, {})
            series.append((float(v.get("frequency", np.nan)), float(v.get("low_95", np.nan)),
                           float(v.get("high_95", np.nan))))
        values = np.array(series).reshape(-1, 3)
        line = ax.plot(xs, values[:, 0], "-", label=name[:20])[0]
        ax.fill_between(xs, values[:, 1], values[:, 2], alpha=0.2, color=line.get_color())
        if truth is not None:
            ax.axhline(truth.get(name, 0.0), color=line.get_color(), linestyle="--", linewidth=0.8)
    if over == "n":
        ax.set_xscale("log")
        ax.set_xlabel("reports n")
    else:
        ax.set_xlabel("snapshot time (UTC)")
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")
    ax.set_ylabel("frequency")
    ax.set_title("top 5 over " + ("n" if over == "n" else "time") + (" (dashed: truth)" if truth else ""))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_joint(out: str | Path, latest: Mapping[str, Any], history: Sequence[Mapping[str, Any]],
               title: str | None = None) -> Path:
    """Write an association's figure (the module docstring) to ``out`` (.png or .svg)."""
    path = check_output(out)
    plt = _pyplot()
    table = np.asarray(latest["table"], dtype=np.float64)
    low, high = np.asarray(latest["low_95"]), np.asarray(latest["high_95"])
    rows, columns = list(latest["rows"]), list(latest["columns"])
    fig, axes = plt.subplots(1, 2, figsize=(15, 6), constrained_layout=True,
                             gridspec_kw={"width_ratios": [1.6, 1]})
    test = latest.get("independence", {})
    fig.suptitle(title or f"{latest.get('association', '')} ({latest.get('window', 'all')}): "
                 f"{latest.get('x', 'x')} × {latest.get('y', 'y')}, {int(latest['n_reports']):,} report pairs; "
                 f"independence {test.get('method', '')} statistic {float(test.get('statistic', np.nan)):.3g}, "
                 f"df {test.get('df', '?')}, p = {float(test.get('p_value', np.nan)):.3g}")
    ax = axes[0]
    image = ax.imshow(table, cmap="viridis", aspect="auto")
    fig.colorbar(image, ax=ax, label="joint frequency")
    bright = table.max(initial=0.0) * 0.6
    unidentified = unidentified_cells(latest)
    for i in range(table.shape[0]):
        for j in range(table.shape[1]):
            mark = "?" if (i, j) in unidentified else ""
            ax.text(j, i, f"{table[i, j]:.3f}\n[{low[i, j]:.3f}, {high[i, j]:.3f}]{mark}", ha="center",
                    va="center", fontsize=7, color="black" if table[i, j] > bright else "white")
    if unidentified:
        reasons = "; ".join(str(r) for r in latest.get("identification") or [])
        ax.annotate(f"{UNIDENTIFIED_NOTE}: {reasons}" if reasons else UNIDENTIFIED_NOTE, (0, 0),
                    xycoords="axes fraction", xytext=(0, -62), textcoords="offset points", fontsize=8,
                    va="top", wrap=True)
    ax.set_xticks(range(len(columns)), [c[:14] for c in columns], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[:18] for r in rows], fontsize=8)
    ax.set_xlabel(str(latest.get("y", "y")))
    ax.set_ylabel(str(latest.get("x", "x")))
    ax.set_title("joint table, 95% intervals")

    ax = axes[1]
    seen: dict[int, Mapping[str, Any]] = {}
    for entry in [latest, *history]:
        seen.setdefault(int(entry["n_reports"]), entry)
    ns = np.array(sorted(n for n in seen if n > 0), dtype=np.float64)
    if ns.size:
        widths = np.array([float(np.mean(np.asarray(seen[int(n)]["high_95"]) - np.asarray(seen[int(n)]["low_95"])))
                           for n in ns])
        ax.loglog(ns, widths, "o-", label="mean cell 95% interval width")
        ax.loglog(ns, widths[-1] * np.sqrt(ns[-1] / ns), ":", color="grey", label="∝ 1/√n")
        ax.legend(fontsize=8)
    ax.set_xlabel("report pairs n")
    ax.set_title("interval width against n")
    fig.savefig(path)
    plt.close(fig)
    return path


def unidentified_cells(joint: Mapping[str, Any]) -> set[tuple[int, int]]:
    """The cells (row, column) a joint estimate publishes as not identified (none when it has no
    ``identified`` table, as objects published before the field)."""
    identified = joint.get("identified")
    if identified is None:
        return set()
    return {(i, j) for i, row in enumerate(identified) for j, known in enumerate(row) if not known}


def truth_frequencies(counts: np.ndarray | None, names: Sequence[str]) -> dict[str, float] | None:
    """A simulation's true counts (one per value, in the metric's value order) as value name → frequency."""
    if counts is None:
        return None
    counts = np.asarray(counts, dtype=np.float64).ravel()
    total = counts.sum()
    if counts.size != len(names) or total <= 0:
        return None
    return {str(name): float(c / total) for name, c in zip(names, counts, strict=True)}
