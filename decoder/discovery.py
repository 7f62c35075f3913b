"""The live decoder of discovery metrics (strings without a dictionary, docs/math/dictionary.md, "Live").

For each window of a discovery metric, every pass:

1. read the window's buckets of the full-string metric, of each n-gram slot metric and, for each slot pair, the
   association's pair statistic (:meth:`~ldpstream.store.contract.SketchStore.pair_patterns`): a
   :class:`~ldpstream.estimators.discovery.DiscoveryCollection`. Every window reads the buckets still retained
   (``all``: all of them), so the sketches and the pairs cover the same reports (the pair statistics have no
   all-time rollup);
2. run the offline stages (:func:`~ldpstream.estimators.discovery.discover`: n-grams, pairs, cliques, filters,
   final decode), with the window's current dictionary added to the final decode's candidates, so a string
   found once is tested again at every later pass whether or not the graph still holds it, and each slot pair's
   EM started from the window's last table while the pair's kept n-grams stay the same;
3. update the dictionary by the retirement rule (:func:`update_dictionary`) and publish it like a marginal: each
   string of the dictionary with its estimated share of the clients, standard error and 95% interval
   (:class:`PublishedDictionary`, a :class:`~ldpstream.decoder.published.PublishedEstimate` with a
   ``discovery`` block: the stages' times and findings, each string's state, the strings this pass retired).

A window whose sketches did not change since its last pass is republished without decoding (``reused``), and
does not count as a decode for the retirement rule. The dictionary of each window is kept in the process and in
the published estimate (``discovery.dictionary``), from which a restarted decoder takes it up again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ldpstream.decoder.published import DICTIONARY_SCHEMA, PublishedEstimate, window_buckets
from ldpstream.errors import ParameterError
from ldpstream.estimators import DesignCache, Estimate, FactorCache
from ldpstream.estimators.discovery import DiscoveryCollection, DiscoveryResult, discover, scheme_of
from ldpstream.estimators.discovery.decode import PairTable
from ldpstream.estimators.discovery.prefixes import dictionary_estimate, discover_prefixes
from ldpstream.estimators.estimate import ConfidenceInterval
from ldpstream.mechanisms.prefix_olh import PrefixOLH
from ldpstream.registry import MetricConfig, Registry, discovery_pair_name, discovery_slot_name
from ldpstream.store.contract import StatusStore, sum_buckets

log = logging.getLogger(__name__)

#: How the published dictionary is kept (stated in each published estimate; docs/math/dictionary.md, "Live").
RETIREMENT_RULE = ("a string enters the dictionary when the final decode calls it significant; it stays while it "
                   "is significant, and leaves after retire_after consecutive decodes with new reports in which it "
                   "is not")


@dataclass(frozen=True)
class PublishedDictionary(PublishedEstimate):
    """A discovery metric's dictionary over one window, published like a marginal (the values are the
    dictionary's strings) plus what the discovery found (``discovery``): schema ``dictionary/2``
    (``docs/schema/dictionary.v2.schema.json``), the one form of every dictionary in the store, live or offline
    (:func:`offline_dictionary`)."""

    discovery: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["schema"] = DICTIONARY_SCHEMA
        out["discovery"] = dict(self.discovery)
        return out


def offline_dictionary(name: str, found: list[Mapping[str, Any]], n_reports: int, when: float, candidates: int,
                       ngrams: list[int], seconds: Mapping[str, float],
                       parameters: Mapping[str, Any] | None = None) -> PublishedDictionary:
    """What ``ldpstream discover --publish NAME`` stores: the strings an offline discovery found (``found``:
    ``{"string", "estimate", "std_error"}`` each) as the dictionary ``NAME`` over window ``all``, in the live
    decoder's form, each with the Wald interval estimate ± 1.96 standard errors (clipped to [0, 1] when
    published), largest estimate first. No retirement rule applies: every string is significant."""
    found = sorted(found, key=lambda d: (-float(d["estimate"]), str(d["string"])))
    names = tuple(str(d["string"]) for d in found)
    frequencies = np.array([float(d["estimate"]) for d in found])
    se = np.array([float(d["std_error"]) for d in found])
    interval = ConfidenceInterval(frequencies - 1.96 * se, frequencies + 1.96 * se)
    estimate = Estimate(frequencies=frequencies, std_errors=se, n_reports=int(n_reports), method="discovery/detect",
                        labels=list(names), interval=interval,
                        interval_method="wald")
    block: dict[str, Any] = {
        "source": "offline",
        "dictionary": [{"value": text, "significant": True, "misses": 0} for text in names],
        "retired": [], "ngrams": [int(n) for n in ngrams], "candidates": int(candidates),
        "seconds": {stage: float(t) for stage, t in seconds.items()},
    }
    if parameters is not None:
        block["parameters"] = dict(parameters)
    return PublishedDictionary(name, "all", when, float(seconds.get("decode", 0.0)), 0, estimate, names, None,
                               discovery=block)


def update_dictionary(dictionary: Mapping[str, int], significant: set[str], retire_after: int
                      ) -> tuple[dict[str, int], list[str]]:
    """The retirement rule (:data:`RETIREMENT_RULE`) for one decode with new reports: ``dictionary`` maps each
    string to the decodes in a row it has not been significant in; returns the new dictionary and the strings
    this decode retires (sorted)."""
    kept = {text: 0 for text in significant}
    retired = []
    for text, misses in dictionary.items():
        if text in kept:
            continue
        if misses + 1 >= retire_after:
            retired.append(text)
        else:
            kept[text] = misses + 1
    return kept, sorted(retired)


def _digest(arrays: list[np.ndarray]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.shape}{a.dtype.str}".encode())
        h.update(a.data)
    return h.digest()


@dataclass
class _Window:
    """What the decoder keeps of one window between passes."""

    dictionary: dict[str, int]
    digest: bytes = b""
    published: PublishedDictionary | None = None
    #: Each slot pair's last fitted table (the next pass's EM starts from it while its n-grams stay the same).
    pairs: dict[tuple[int, int], PairTable] = field(default_factory=dict)


class DictionaryDecoder:
    """Decodes the windows of the registry's discovery metrics (module docstring)."""

    def __init__(self, registry: Registry, store: StatusStore, reuse: bool = True, *,
                 design_cache: DesignCache | None = None, factor_cache: FactorCache | None = None) -> None:
        self.registry = registry
        self.store = store
        self.reuse = reuse
        #: The decoder service's caches, passed to every decode (None: each decode keeps its own).
        self.design_cache = design_cache
        self.factor_cache = factor_cache
        self._windows: dict[tuple[str, str], _Window] = {}

    def _state(self, metric: MetricConfig, window: str) -> _Window:
        state = self._windows.get((metric.name, window))
        if state is None:  # after a restart: the dictionary as last published
            dictionary: dict[str, int] = {}
            published = self.store.latest_estimate(metric.name, window)
            held = (published or {}).get("discovery", {}).get("dictionary", [])
            if isinstance(held, list):
                dictionary = {str(e["value"]): int(e.get("misses", 0)) for e in held
                              if isinstance(e, Mapping) and "value" in e}
            state = self._windows[(metric.name, window)] = _Window(dictionary)
        return state

    def decode(self, metric: MetricConfig, now: float | None = None
               ) -> tuple[list[PublishedDictionary], list[str]]:
        """The dictionaries of the metric's windows that hold reports, and the windows that hold none."""
        now = time.time() if now is None else now
        config = metric.discovery
        if config is None or metric.part_of is not None:
            raise ValueError(f"metric {metric.name!r} is not a discovery metric")
        if config.method == "prefix":
            return self._decode_prefix(metric, now)
        scheme = scheme_of(self.registry, metric)
        slots = [self.registry[discovery_slot_name(metric.name, j)] for j in range(config.slots)]
        expired_before = None
        if metric.retention_seconds is not None:
            expired_before = int((now - metric.retention_seconds) // metric.bucket_seconds)
        full_shape = (scheme.full.cohorts, scheme.full.sketch_width)
        ngram_shape = (scheme.ngram.cohorts, scheme.ngram.sketch_width)
        full = self.store.snapshot(metric.name, metric.fingerprint, full_shape, expired_before)
        ngrams = [self.store.snapshot(s.name, s.fingerprint, ngram_shape, expired_before) for s in slots]
        out: list[PublishedDictionary] = []
        empty: list[str] = []
        for window in metric.windows:
            buckets = window_buckets(full, window, metric.bucket_seconds, now)
            full_sketch = sum_buckets(full, buckets, full_shape)
            if scheme.full.reports_per_cohort(full_sketch).sum() == 0:
                empty.append(window.name)
                self._windows.pop((metric.name, window.name), None)
                continue
            started = time.perf_counter()
            state = self._state(metric, window.name)
            ngram_sketches = np.stack([sum_buckets(s, buckets, ngram_shape) for s in ngrams])
            digest = _digest([full_sketch, ngram_sketches]) if self.reuse else b""
            covers = (min(buckets) * metric.bucket_seconds, (max(buckets) + 1) * metric.bucket_seconds)
            if self.reuse and state.published is not None and state.digest == digest:
                out.append(replace(state.published, snapshot_time=now, decode_seconds=time.perf_counter() - started,
                                   covers=covers, reused=True))
                continue
            pairs = {(a, b): self.store.pair_patterns(
                self.registry.association(discovery_pair_name(metric.name, a, b)), buckets)
                for a, b in config.slot_pairs}
            collection = DiscoveryCollection(full_sketch, ngram_sketches, pairs)
            result = discover(collection, scheme, alpha=config.alpha, pattern=config.pattern,
                              max_candidates=config.max_candidates, extra_candidates=sorted(state.dictionary),
                              pair_starts=state.pairs if self.reuse else None, design_cache=self.design_cache,
                              factor_cache=self.factor_cache)
            state.pairs = dict(result.pair_tables)
            significant = {d.string for d in result.discovered}
            dictionary, retired = update_dictionary(state.dictionary, significant, config.retire_after)
            # a string the final decode did not take (a semantic filter changed) has no estimate: it leaves too
            decoded = {scheme.shape.unpadded(str(c)) for c in result.candidates}
            retired = sorted(set(retired) | {text for text in dictionary if text not in decoded})
            dictionary = {text: misses for text, misses in dictionary.items() if text in decoded}
            published = self._published(metric, window.name, now, started, len(buckets), covers, result,
                                        dictionary, retired, significant, collection.clients)
            state.dictionary, state.digest, state.published = dictionary, digest, published
            if retired:
                log.info("metric %s, window %s: retired %d string(s) from the dictionary", metric.name, window.name,
                         len(retired))
            out.append(published)
        return out, empty

    def _decode_prefix(self, metric: MetricConfig, now: float) -> tuple[list[PublishedDictionary], list[str]]:
        """A prefix discovery metric (docs/math/dictionary.md#prefix-extension): per window, the prefix-extension
        decode of its sketch; the dictionary's strings estimated from the last group's reports."""
        config = metric.discovery
        mechanism = metric.mechanism
        assert config is not None and isinstance(mechanism, PrefixOLH)
        expired_before = None
        if metric.retention_seconds is not None:
            expired_before = int((now - metric.retention_seconds) // metric.bucket_seconds)
        shape = (mechanism.cohorts, mechanism.sketch_width)
        snapshot = self.store.snapshot(metric.name, metric.fingerprint, shape, expired_before)
        out: list[PublishedDictionary] = []
        empty: list[str] = []
        for window in metric.windows:
            buckets = window_buckets(snapshot, window, metric.bucket_seconds, now)
            sketch = sum_buckets(snapshot, buckets, shape)
            if sketch.sum() == 0:
                empty.append(window.name)
                self._windows.pop((metric.name, window.name), None)
                continue
            started = time.perf_counter()
            state = self._state(metric, window.name)
            digest = _digest([sketch]) if self.reuse else b""
            covers = (min(buckets) * metric.bucket_seconds, (max(buckets) + 1) * metric.bucket_seconds)
            if self.reuse and state.published is not None and state.digest == digest:
                out.append(replace(state.published, snapshot_time=now, decode_seconds=time.perf_counter() - started,
                                   covers=covers, reused=True))
                continue
            result = discover_prefixes(mechanism, sketch, alpha=config.alpha)
            significant = {d.string for d in result.discovered}
            dictionary, retired = update_dictionary(state.dictionary, significant, config.retire_after)
            # strings held from before that this metric's strings cannot be (its settings changed) leave, and two
            # that pad to the same string are one
            fitting: dict[str, str] = {}
            for text in sorted(dictionary, key=lambda t: (t not in significant, t)):
                with contextlib.suppress(ParameterError):
                    fitting.setdefault(mechanism.padded(text), text)
            kept = set(fitting.values())
            retired = sorted(set(retired) | (set(dictionary) - kept))
            dictionary = {t: m for t, m in dictionary.items() if t in kept}
            if config.pattern is not None:
                pattern = re.compile(config.pattern)
                retired = sorted(set(retired) | {t for t in dictionary if not pattern.fullmatch(t)})
                dictionary = {t: m for t, m in dictionary.items() if pattern.fullmatch(t)}
            names = sorted(dictionary)
            last = sketch.reshape(mechanism.groups, mechanism.hashes, mechanism.k)[-1]
            if names and last.sum() > 0:  # largest first (the same least squares, its columns in that order)
                first = dictionary_estimate(mechanism, sketch, [mechanism.padded(t) for t in names])
                names = [names[i] for i in np.argsort(-np.asarray(first.frequencies), kind="stable")]
                # the shares are of every client (the last group is a uniform sample of them)
                estimate = replace(dictionary_estimate(mechanism, sketch, [mechanism.padded(t) for t in names]),
                                   n_reports=int(sketch.sum()))
            else:  # no string, or no whole-string report in this window yet: the dictionary without estimates
                names = []
                estimate = Estimate(frequencies=np.zeros(0), std_errors=np.zeros(0), n_reports=int(sketch.sum()),
                                    method="discovery/prefix", labels=[])
            block = {
                "source": "live", "method": "prefix", "rule": RETIREMENT_RULE, "retire_after": config.retire_after,
                "dictionary": [{"value": t, "significant": t in significant, "misses": dictionary[t]} for t in names],
                "retired": retired, "ngrams": [], "edges": {},
                "candidates": result.steps[-1].candidates if result.steps else 0,
                "seconds": {f"step_{s.length}": float(s.seconds) for s in result.steps},
                "steps": [s.to_dict() for s in result.steps], "alpha": config.alpha,
            }
            published = PublishedDictionary(metric.name, window.name, now, time.perf_counter() - started, len(buckets),
                                            estimate, tuple(names), covers, discovery=block)
            state.dictionary, state.digest, state.published = dictionary, digest, published
            out.append(published)
        return out, empty

    def _published(self, metric: MetricConfig, window: str, now: float, started: float, buckets: int,
                   covers: tuple[int, int], result: DiscoveryResult, dictionary: dict[str, int],
                   retired: list[str], significant: set[str], clients: int) -> PublishedDictionary:
        config = metric.discovery
        assert config is not None
        final = result.final
        names: list[str] = []
        index: list[int] = []
        if final is not None:
            position = {str(label).rstrip(config.pad): i for i, label in enumerate(final.labels or [])}
            chosen = [(text, position[text]) for text in dictionary if text in position]
            chosen.sort(key=lambda item: (-float(final.frequencies[item[1]]), item[0]))
            names = [text for text, _ in chosen]
            index = [i for _, i in chosen]
        picked = np.asarray(index, dtype=np.int64)
        if final is not None:
            se = final.std_errors[picked] if final.std_errors is not None else None
            interval = (None if final.interval is None else
                        ConfidenceInterval(final.interval.low[picked], final.interval.high[picked]))
            raw = final.unclipped_interval
            unclipped = None if raw is None or interval is None else ConfidenceInterval(raw.low[picked],
                                                                                         raw.high[picked])
            estimate = Estimate(frequencies=np.asarray(final.frequencies)[picked], std_errors=se, n_reports=clients,
                                method="discovery/detect",
                                labels=names, interval=interval, interval_method=final.interval_method,
                                info={"null_fraction": float(getattr(final, "null_fraction", 1.0))},
                                unclipped_interval=unclipped)
        else:
            estimate = Estimate(frequencies=np.zeros(0), std_errors=np.zeros(0), n_reports=clients,
                                method="discovery/detect", labels=[])
        alpha_edge = float(result.info.get("alpha_edge", float("nan")))
        block = {
            "source": "live",
            "rule": RETIREMENT_RULE,
            "retire_after": config.retire_after,
            "dictionary": [{"value": text, "significant": text in significant, "misses": dictionary[text]}
                           for text in names],
            "retired": retired,
            "ngrams": [len(part) for part in result.ngrams],
            "edges": {f"{a},{b}": e for (a, b), e in result.edges.items()},
            "candidates": len(result.candidates),
            "seconds": {stage: float(t) for stage, t in result.seconds.items()},
            "alpha_edge": alpha_edge if np.isfinite(alpha_edge) else None,  # JSON has no NaN
            "pair_em_iterations": int(result.info.get("pair_em_iterations", 0)),
            "pair_em_warm_starts": int(result.info.get("pair_em_warm_starts", 0)),
            "correction": result.info.get("correction"),
            "alpha": config.alpha,
        }
        return PublishedDictionary(metric.name, window, now, time.perf_counter() - started, buckets, estimate,
                                   tuple(names), covers, discovery=block)
