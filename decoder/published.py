"""What the decoder publishes for one metric and window (the estimate with its provenance, and how a
window's buckets are chosen and decoded), and for one association of two metrics and window (the joint
table over the members' candidates, :class:`PublishedJoint`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from ldpstream.estimators import DesignCache, Estimate, FactorCache, design_matrix, estimate
from ldpstream.estimators.detection import DetectionEstimate
from ldpstream.estimators.joint import OTHER_LABEL, ConditionalTable, JointEstimate, JointVariable, top_values
from ldpstream.estimators.windows import WindowDesign, value_design_effects, widen_estimate, window_design
from ldpstream.registry import MetricConfig, Window
from ldpstream.store.contract import MetricSnapshot

#: The name and version of the JSON Schema each published object follows (``docs/schema/``), carried by every
#: object as ``"schema"``: a consumer in another language checks it before reading the rest.
MARGINAL_SCHEMA = "marginal-estimate/1"
JOINT_SCHEMA = "joint-estimate/1"
RETRACTION_SCHEMA = "retraction/1"
#: A discovery's dictionary (live, or ``discover --publish``): a marginal's fields plus a ``discovery`` block.
DICTIONARY_SCHEMA = "dictionary/2"


def json_text(obj: Any) -> str:
    """``obj`` as compact JSON text, by orjson (docs/math/estimators.md#the-sandwich-from-cached-factors). Floats
    are written in their shortest round-trip form, as ``json.dumps`` writes them (``1e-05`` is ``1e-5``); numpy
    scalars and arrays are accepted; a non-finite float becomes ``null`` (JSON has no NaN)."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def window_buckets(snapshot: MetricSnapshot, window: Window, bucket_seconds: int, now: float) -> list[int]:
    """Buckets that overlap the window ``(now − window.seconds, now]`` (every bucket for ``all``)."""
    if window.seconds is None:
        return sorted(snapshot.buckets)
    start = now - window.seconds
    return sorted(b for b in snapshot.buckets if (b + 1) * bucket_seconds > start and b * bucket_seconds <= now)


def decode_sketch(metric: MetricConfig, sketch: np.ndarray, start: np.ndarray | None = None, *,
                  design_cache: DesignCache | None = None, factor_cache: FactorCache | None = None) -> Estimate:
    """Decode one summed ``(C, W)`` sketch with the metric's estimator; ``start``: a previous estimate's
    parameters, from which an iterative decoder starts; ``design_cache``, ``factor_cache``: the caller's caches
    (:func:`ldpstream.estimators.estimate`; None: none)."""
    if start is None:
        return estimate(sketch, metric.mechanism, method=metric.estimator, candidates=metric.candidates,
                        design_cache=design_cache, factor_cache=factor_cache)
    return estimate(sketch, metric.mechanism, method=metric.estimator, candidates=metric.candidates, start=start,
                    design_cache=design_cache, factor_cache=factor_cache)


def decode_window(metric: MetricConfig, sketch: np.ndarray, bucket_sketches: Sequence[np.ndarray],
                  rollup: bool = False, start: np.ndarray | None = None, *,
                  design_cache: DesignCache | None = None, factor_cache: FactorCache | None = None
                  ) -> tuple[Estimate, WindowDesign, np.ndarray]:
    """Decode a window's summed ``sketch`` and widen its intervals for the reports its buckets repeat
    (:mod:`ldpstream.estimators.windows`): ``(estimate, repetition model, design effect per value)``.

    ``bucket_sketches`` are the window's buckets; ``rollup``: ``sketch`` is the all-time rollup, which may hold
    buckets that expired (the overlap is measured on the buckets given and applied to the rollup's span);
    ``start`` and the caches: as :func:`decode_sketch`."""
    est = decode_sketch(metric, sketch, start, design_cache=design_cache, factor_cache=factor_cache)
    mechanism = metric.mechanism
    design = window_design(mechanism, bucket_sketches, sketch if rollup else None)
    deff = value_design_effects(design, design_matrix(mechanism, metric.candidates, design_cache), est.frequencies)
    if deff.shape != est.frequencies.shape:  # a decoder that reports fewer or more values than the design
        deff = np.full(est.frequencies.shape, float(deff.max(initial=1.0)))
    return widen_estimate(est, deff, mechanism, sketch), design, deff


@dataclass(frozen=True)
class PublishedEstimate:
    """One metric's estimate over one window, as published."""

    metric: str
    window: str
    snapshot_time: float
    decode_seconds: float
    buckets: int
    estimate: Estimate
    names: tuple[str, ...]
    #: Event times the summed buckets cover, [from, to) in seconds: whole buckets, so a window of the last
    #: hour over hourly buckets may reach back up to two hours.
    covers: tuple[int, int] | None = None
    #: How the window's reports repeat (the model its intervals use), and the design effect of each value.
    design: WindowDesign | None = None
    design_effects: np.ndarray | None = None
    #: Republished from the previous pass without decoding: the window's counts had not changed since.
    reused: bool = False
    #: The JSON text of ``values`` once made (at most one entry), shared by the copies that republish this
    #: estimate unchanged (:func:`dataclasses.replace` passes it on): see :meth:`body`.
    values_text: list[str] = field(default_factory=list, compare=False, repr=False)

    def body(self) -> str:
        """:func:`json_text` of :meth:`to_json`, with the text of ``values`` (the bulk of it: up to thousands of
        rows) made once per decode and reused when the estimate is republished unchanged ("values" is the last
        key, so the text is the same)."""
        if type(self).to_json is not PublishedEstimate.to_json:  # a subclass adds keys: no splicing
            return json_text(self.to_json())
        if not self.values_text:
            self.values_text.append(json_text(self._values()))
        head = json_text(self._head())  # a non-empty object: "{...}"
        return f'{head[:-1]},"values":{self.values_text[0]}}}'

    def to_json(self) -> dict[str, Any]:
        out = self._head()
        out["values"] = self._values()
        return out

    def _values(self) -> list[dict[str, Any]]:
        est = self.estimate
        ci = est.ci(0.95, clip=True) if est.std_errors is not None or est.interval is not None else None
        # Columns as Python floats in one conversion each (tolist), then one dict per value.
        columns: list[tuple[str, list[float]]] = [("frequency", _floats(est.frequencies))]
        if est.std_errors is not None:
            columns.append(("std_error", _floats(est.std_errors)))
        if ci is not None:
            columns += [("low_95", _floats(ci.low)), ("high_95", _floats(ci.high))]
        if self.design_effects is not None:
            columns.append(("design_effect", _floats(self.design_effects)))
        detected = self._detected()
        if detected is not None:
            columns.append(("detected", detected.tolist()))
        # one dict per value, filled a column at a time (half the time of a dict(zip(keys, row)) per row)
        values: list[dict[str, Any]] = [{"value": name} for name in self.names]
        for key, col in columns:
            for row, item in zip(values, col, strict=False):
                row[key] = item
        return values

    def _head(self) -> dict[str, Any]:
        """Every field of :meth:`to_json` but ``values`` (its last)."""
        est = self.estimate
        return {
            "schema": MARGINAL_SCHEMA,
            "metric": self.metric,
            "window": self.window,
            "snapshot_time": self.snapshot_time,
            "decode_seconds": self.decode_seconds,
            "reused": self.reused,
            "buckets": self.buckets,
            "covers": None if self.covers is None else {"from": self.covers[0], "to": self.covers[1]},
            "method": est.method,
            "interval_method": est.interval_method,
            "design_effect": None if self.design_effects is None else float(np.max(self.design_effects, initial=1.0)),
            "interval_assumes": "independent reports" if self.design is None else self.design.assumes(),
            "repetition": None if self.design is None else self.design.to_json(),
            "n_reports": int(est.n_reports),
            "residual": est.residual,
            "detection_floor": est.detection_floor,
            **({} if est.misfit is None else {"fit": est.misfit.to_json()}),
            **self._detection(),
        }

    def _detected(self) -> np.ndarray | None:
        """Which values the detection's rule keeps (``detect`` only), with the published (widened) tests."""
        est = self.estimate
        if not isinstance(est, DetectionEstimate):
            return None
        mask: np.ndarray = est.significant(float(est.info["alpha"]), est.info["rule"])
        return mask

    def _detection(self) -> dict[str, Any]:
        """``{"detection": {...}}``: how ``detect`` decided (its rule and level, the adaptive Benjamini–Hochberg
        procedure and the share of absent candidates it estimated, the published point, how many were screened
        and detected); ``{}`` for the other decoders."""
        detected = self._detected()
        est = self.estimate
        if detected is None or not isinstance(est, DetectionEstimate):
            return {}
        info = est.info
        adaptive = str(info.get("adaptive", "none"))
        return {"detection": {
            "rule": str(info["rule"]), "alpha": float(info["alpha"]), "adaptive": adaptive,
            # the share the rule estimates from the published (possibly widened) tests
            "null_fraction": est.null_share(float(info["alpha"])) if adaptive != "none" else 1.0,
            "point": str(info["point"]),
            "screened": int(info["selected"]), "detected": int(np.count_nonzero(detected)),
        }}


#: The name of the category that gathers every value outside a variable's candidates in a joint table.
OTHER = OTHER_LABEL


def joint_variable(metric: MetricConfig, marginal: Estimate, count: int) -> JointVariable:
    """The candidates of one member of an association: the ``count`` values its marginal estimate of the same
    window ranks highest (:func:`~ldpstream.estimators.joint.top_values`), named as the marginal names them:
    the candidate strings of a metric decoded against a candidate list, else the alphabet's indices.

    The "Other" rule takes the candidates' frequencies from the pairs' own sketch, so the joint table depends
    on the window's report pairs alone: the least squares against the metric's whole candidate list when it
    has one (a closed alphabet: all its values) and its design is well-determined (``JointVariable.dictionary``),
    else against the candidates alone (docs/math/joint.md#candidate-frequencies-from-the-dictionary); the latter
    makes the table not identified (docs/math/joint.md#cells-the-reports-do-not-identify). A closed alphabet
    keeps at least one value out of its candidates: "Other" with no value behind it would be a category the
    reports cannot identify (a singular information matrix, degenerate intervals)."""
    names = metric.value_names()
    if metric.candidates is None:
        count = min(count, len(names) - 1)
    top = top_values(marginal, count)
    values: list[Any] = [metric.candidates[v] for v in top] if metric.candidates is not None else top
    # The whole candidate list, or a closed alphabet's every index (for a direct mechanism it is not used).
    dictionary: list[Any] = list(metric.candidates) if metric.candidates is not None else list(range(len(names)))
    return JointVariable(metric.mechanism, values, tuple(str(names[v]) for v in top), dictionary=dictionary)


@dataclass(frozen=True)
class PublishedJoint:
    """The joint estimate of one association (X, Y) over one window, as published: the table over the
    members' candidates plus "Other", with intervals, the conditionals and the independence test."""

    association: str
    #: The member metrics: X (the table's rows) and Y (its columns).
    members: tuple[str, str]
    window: str
    snapshot_time: float
    #: Wall time of the whole decode of this window (reading the pairs and the EM).
    decode_seconds: float
    buckets: int
    estimate: JointEstimate
    #: Whether the EM started from the previous decode's table (the candidates had not changed); false when no EM
    #: ran (two direct members: the closed-form inversion of :mod:`ldpstream.estimators.joint.direct`).
    warm_start: bool
    covers: tuple[int, int] | None = None
    #: The design effect of the window's repeated report pairs applied to the table's uncertainty
    #: (:func:`~ldpstream.estimators.windows.joint_design_effect`), and the members' window designs it comes from.
    design_effect: float = 1.0
    designs: tuple[WindowDesign | None, WindowDesign | None] = (None, None)

    def interval_assumes(self) -> str:
        """What the intervals and the test assume, in words."""
        if self.design_effect <= 1.0:
            # A member whose reports may repeat says more than one with fresh noise (or without bucket counts).
            known = sorted((d for d in self.designs if d is not None),
                           key=lambda d: d.rule in ("fresh-noise", "unknown-independent"))
            return known[0].assumes().replace("report", "report pair") if known else "independent report pairs"
        span = max(d.span for d in self.designs if d is not None)
        return (f"repeated report pairs of unchanged values over {span:.3g} buckets with memoized permanent "
                "responses, as the members' reports repeat (every client's pairs correlated by at most 1)")

    @property
    def key(self) -> str:
        """The key of its messages on the estimates topic (marginals use ``<metric>:<window>``)."""
        return f"joint:{self.association}:{self.window}"

    def to_json(self) -> dict[str, Any]:
        est = self.estimate
        return {
            "schema": JOINT_SCHEMA,
            "association": self.association,
            "x": self.members[0],
            "y": self.members[1],
            "window": self.window,
            "snapshot_time": self.snapshot_time,
            "decode_seconds": self.decode_seconds,
            "buckets": self.buckets,
            "covers": None if self.covers is None else {"from": self.covers[0], "to": self.covers[1]},
            "n_reports": int(est.n),
            "rows": [str(label) for label in est.row_labels],
            "columns": [str(label) for label in est.column_labels],
            "interval_method": est.interval_method,
            "point": est.point,
            "interval_assumes": self.interval_assumes(),
            "design_effect": self.design_effect,
            "repetition": {member: None if design is None else design.to_json()
                           for member, design in zip(self.members, self.designs, strict=True)},
            "table": _nested(est.table),
            "std_error": _nested(est.std_error),
            "low_95": _nested(est.low),
            "high_95": _nested(est.high),
            "identified": [[bool(v) for v in row] for row in est.identified_mask()],
            "identification": list(est.identification),
            "fit": {member: None if m is None else m.to_json()
                    for member, m in zip(self.members, est.fit, strict=True)},
            "x_given_y": _conditional(est.x_given_y),
            "y_given_x": _conditional(est.y_given_x),
            "independence": {
                "statistic": float(est.independence.statistic),
                "df": int(est.independence.df),
                "p_value": float(est.independence.p_value),
                "method": est.independence.method,
                "wald_statistic": float(est.independence.wald_statistic),
                "wald_p_value": float(est.independence.wald_p_value),
            },
            "em": {"iterations": int(est.iterations), "converged": bool(est.converged),
                   "stopping_rule": est.stopping_rule, "warm_start": self.warm_start, "patterns": int(est.patterns),
                   "seconds": float(est.em_seconds), "likelihood_seconds": float(est.likelihood_seconds),
                   "estimate_seconds": float(est.seconds)},
        }


def _floats(values: Any) -> list[float]:
    """A 1-D array as a list of Python floats."""
    out: list[float] = np.asarray(values, dtype=np.float64).ravel().tolist()
    return out


def _nested(table: np.ndarray) -> list[list[float]]:
    """A 2-D array as JSON rows of floats."""
    return [[float(v) for v in row] for row in np.asarray(table, dtype=np.float64)]


def _conditional(conditional: ConditionalTable) -> dict[str, Any]:
    return {"table": _nested(conditional.table), "std_error": _nested(conditional.std_error),
            "low_95": _nested(conditional.low), "high_95": _nested(conditional.high)}
