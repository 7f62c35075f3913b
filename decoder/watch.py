"""``ldpstream watch``: a live terminal view of a metric's latest published estimate, or of an association's
latest joint estimate (the table with intervals and the independence test)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpstream.errors import ConfigError
from ldpstream.estimators.misfit import MISFIT_LEVEL
from ldpstream.store.contract import EstimateStore

if TYPE_CHECKING:
    from ldpstream.registry import Registry

_BAR_WIDTH = 30


def fit_line(fit: Mapping[str, Any]) -> str:
    """One line on the candidate model's goodness of fit (a published ``fit``, docs/math/misfit.md)."""
    p = float(fit["p_value"])
    line = (f"fit: dispersion {float(fit['dispersion']):.2f} on {int(fit['df']):,} df "
            f"(p {'< 1e-16' if p < 1e-16 else f'= {p:.2g}'})")
    if p < MISFIT_LEVEL:
        cells = ", ".join(f"cohort {c['cohort']} cell {c['cell']}" for c in list(fit.get("cells", ()))[:3])
        line += (f": the candidates miss mass, about {float(fit['excess_reports']):,.0f} reports unexplained"
                 + (f" (most at {cells})" if cells else "")
                 + f"; standard errors widened by {float(fit['inflation']):.2f}")
    return line


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
    fit = published.get("fit")
    if isinstance(fit, Mapping):
        lines.append(fit_line(fit))
    detection = published.get("detection")
    if isinstance(detection, Mapping):
        # objects published before the field: the adaptive rule was Storey's whenever its share was below 1
        procedure = str(detection.get("adaptive", "storey" if float(detection["null_fraction"]) < 1 else "none"))
        adaptive = (f" ({procedure}) / estimated absent share {float(detection['null_fraction']):.2f}"
                    if detection["rule"] == "bh" and procedure != "none" else "")
        lines.append(f"detection: {detection['detected']} detected (*) by {detection['rule']} at "
                     f"{float(detection['alpha']):g}{adaptive}, {detection['screened']} screened; "
                     f"point: {detection['point']}")
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
        mark = "*" if entry.get("detected") else " "
        line = f"{str(entry['value'])[:23]:<23}{mark} {freq:9.4f} {interval:>21}"
        if with_deff:
            line += f" {entry['design_effect']:5.2f}" if "design_effect" in entry else " " * 6
        if truth is not None:
            line += f" {truth[i]:8.4f}"
        lines.append(f"{line}  {bar}")
    if published.get("residual") is not None:
        lines.append(f"unexplained mass (outside the candidates): {published['residual']:.4f}")
    discovery = published.get("discovery")
    if isinstance(discovery, Mapping):
        lines.extend(_discovery_lines(discovery))
    return "\n".join(lines)


def _discovery_lines(discovery: Mapping[str, Any]) -> list[str]:
    """A discovery metric's dictionary: how it was found (per stage) and kept (the retirement rule)."""
    entries = list(discovery.get("dictionary", []))
    fading = [f"{e['value']} ({e['misses']} miss{'es' if e['misses'] != 1 else ''})" for e in entries
              if not e.get("significant", True)]
    seconds = discovery.get("seconds", {})
    stages = ", ".join(f"{stage} {float(seconds[stage]):.2f} s" for stage in ("ngrams", "pairs", "cliques", "final")
                       if stage in seconds)
    if discovery.get("method") == "prefix":
        steps = ", ".join(f"{s['length']}: {s['selected']} of {s['candidates']}" for s in discovery.get("steps", []))
        how = f"prefixes kept per length {steps}"
    else:
        how = f"n-grams kept per slot {discovery.get('ngrams', [])}; {stages}"
    lines = [f"discovered dictionary: {len(entries)} strings from {discovery.get('candidates', 0)} candidates; {how}"]
    if fading:
        lines.append(f"not significant this decode (retired after {discovery.get('retire_after')}): "
                     + ", ".join(fading))
    if discovery.get("retired"):
        lines.append("retired now: " + ", ".join(str(r) for r in discovery["retired"]))
    return lines


def render_joint(published: Mapping[str, Any], now: float | None = None) -> str:
    """The joint table of an association: each cell's frequency with its 95% interval (marked ``?`` where the
    cell is not identified, with the reasons below the table), each hashed member's fit against its candidate
    list, what the point is, then the test of independence (statistic, degrees of freedom, p-value) and the EM's
    figures."""
    now = time.time() if now is None else now
    rows, columns = list(published["rows"]), list(published["columns"])
    table, low, high = published["table"], published["low_95"], published["high_95"]
    em = published.get("em", {})
    age = now - float(published["snapshot_time"])
    lines = [
        f"association {published['association']} ({published['x']} × {published['y']})  window "
        f"{published['window']}  report pairs {published['n_reports']:,}  snapshot {age:.1f} s ago",
        f"joint frequency [95% interval, {published['interval_method']}]; rows {published['x']}, "
        f"columns {published['y']}",
    ]
    label_width = min(max(max((len(str(r)) for r in rows), default=1), len(str(published["x"]))), 24)
    cell_width = 21
    lines.append(f"{_fit(published['x'], label_width):<{label_width}} "
                 + " ".join(f"{_fit(c, cell_width):>{cell_width}}" for c in columns))
    identified = published.get("identified")
    for i, row in enumerate(rows):
        cells = [f"{table[i][j]:6.4f} [{_short(low[i][j])},{_short(high[i][j])}]"
                 + ("" if identified is None or identified[i][j] else "?") for j in range(len(columns))]
        lines.append(f"{_fit(row, label_width):<{label_width}} " + " ".join(f"{c:>{cell_width}}" for c in cells))
    reasons = published.get("identification") or []
    if identified is not None and not all(all(r) for r in identified):
        lines.append("? not identified, the interval is no promise: " + "; ".join(str(r) for r in reasons))
    for member, fit in (published.get("fit") or {}).items():
        if isinstance(fit, Mapping):
            lines.append(f"{member} against its candidates, {fit_line(fit)}")
    if "point" in published:
        lines.append(f"point: {published['point']}")
    test = published["independence"]
    lines.append(f"independence ({test['method']}): statistic {test['statistic']:.2f}, df {test['df']}, "
                 f"p-value {test['p_value']:.3g}")
    if em and published.get("interval_method") == "wald-clipped-inversion":
        lines.append(f"closed form (inversion of the full alphabets or candidate lists, no EM): "
                     f"{em.get('estimate_seconds', em['seconds']):.3f} s")
    elif em:
        whole = f" (estimate with intervals {em['estimate_seconds']:.3f} s)" if "estimate_seconds" in em else ""
        lines.append(f"EM: {em['iterations']} iterations{'' if em['converged'] else ' (not converged)'}, "
                     f"{em['seconds']:.3f} s{whole}{', warm start' if em.get('warm_start') else ''}")
    return "\n".join(lines)


def _fit(name: Any, width: int) -> str:
    """``name`` in at most ``width`` characters, keeping its end (candidates often share a long prefix)."""
    text = str(name)
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


def _short(x: float) -> str:
    """A bound in [0, 1] in 5 characters: ``.1234``, ``1.000``."""
    return f"{x:5.3f}" if x >= 1 else f"{x:.4f}"[1:]


def check_watchable(registry: Registry, store: EstimateStore, name: str, window: str) -> None:
    """Refuse, in one line with the closest valid name, a ``name`` that is neither a metric nor an association of
    ``registry`` nor a dictionary published offline (``discover --publish``), and a ``window`` it does not have."""
    from ldpstream.registry import closest

    windows: tuple[str, ...]
    if name in registry.metrics:
        kind, windows = "metric", tuple(w.name for w in registry.metrics[name].windows)
    elif name in registry.associations:
        kind, windows = "association", tuple(w.name for w in registry.associations[name].windows)
    elif name in store.dictionaries():
        kind, windows = "dictionary", ("all",)
    else:
        known = sorted({*registry.metrics, *registry.associations})
        where = f" {registry.source}" if registry.source is not None else ""
        raise ConfigError(f"no metric or association named {name!r} in the registry{where}{closest(name, known)} "
                          f"(known: {', '.join(known) or 'none'})")
    if window not in windows:
        raise ConfigError(f"{kind} {name!r} has no window {window!r}{closest(window, windows)} (its windows: "
                          f"{', '.join(windows)})")


def watch(store: EstimateStore, metric: str, window: str = "all", interval: float = 1.0,
          top: int = 20, iterations: int | None = None, registry: Callable[[], Registry] | None = None) -> None:
    """Show the latest estimate of ``metric`` over ``window`` every ``interval`` seconds; when no metric of
    that name has one, the latest joint estimate of the association of that name. While nothing is published,
    ``registry`` (a loader, called once) must know the name and window (:func:`check_watchable`: a ConfigError
    otherwise); a known one is waited for."""
    done = 0
    checked = registry is None
    while iterations is None or done < iterations:
        published = store.latest_estimate(metric, window)
        joint = store.latest_joint(metric, window) if published is None else None
        if published is not None:
            text = render(published, top=top)
        elif joint is not None:
            text = render_joint(joint)
        else:
            if not checked and registry is not None:
                check_watchable(registry(), store, metric, window)
                checked = True
            text = f"no estimate of {metric!r} ({window}) published yet"
        # Clear the screen only on a terminal: piped or captured output gets plain text.
        clear = "\x1b[2J\x1b[H" if sys.stdout.isatty() else ""
        sys.stdout.write(clear + text + "\n")
        sys.stdout.flush()
        done += 1
        if iterations is None or done < iterations:
            time.sleep(interval)
