"""Simulated discovery: a population drawn from a ranked string list, encoded by the real client code path
(:func:`~ldpstream.estimators.discovery.reports.encode_population`), aggregated, decoded
(:func:`~ldpstream.estimators.discovery.decode.discover`) and scored against the truth and against decoding
with the perfect dictionary (docs/math/dictionary.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.distributions import sample_values
from ldpstream.errors import ParameterError
from ldpstream.estimators.discovery import (
    ClientReports,
    DiscoveredString,
    DiscoveryCollection,
    DiscoveryResult,
    DiscoveryScheme,
    StringShape,
    decode_full,
    discover,
    encode_population,
)
from ldpstream.estimators.discovery.scheme import carrier_error
from ldpstream.mechanisms.base import BitMechanism
from ldpstream.mechanisms.factory import make_mechanism

__all__ = ["DiscoveryRun", "load_reports", "run_discovery", "save_reports", "simulate_collection"]

#: Clients encoded per batch (bounds the memory of the raw reports: about 400 bytes per client).
CHUNK = 250_000


def simulate_collection(scheme: DiscoveryScheme, strings: Sequence[str], probabilities: np.ndarray, n: int,
                        rng: np.random.Generator, chunk: int = CHUNK) -> DiscoveryCollection:
    """The aggregate of ``n`` clients drawing from ``strings`` with ``probabilities`` (seeded: simulation)."""
    if n < 1:
        raise ParameterError("need at least one client")
    values = sample_values(np.asarray(probabilities, dtype=np.float64), n, rng)
    parts = [DiscoveryCollection.fold(scheme, encode_population(scheme, strings, values[i:i + chunk], rng))
             for i in range(0, n, chunk)]
    return parts[0] if len(parts) == 1 else DiscoveryCollection.combine(parts)


@dataclass(frozen=True)
class DiscoveryRun:
    """A simulated discovery, scored: the result, true and false positives, and (when asked) the decode with
    the perfect dictionary (recall: the share of its significant strings that discovery found; precision:
    the share of discovered strings that are true)."""

    result: DiscoveryResult
    true_positives: int
    false_positives: int
    seconds: dict[str, float]
    perfect: list[DiscoveredString] | None = None
    memory_bytes: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "discovered": [d.to_dict() for d in self.result.discovered],
            "true_positives": self.true_positives,
            "false_positives": self.false_positives,
            "seconds": dict(self.seconds),
            "candidates": len(self.result.candidates),
            "ngrams": self.result.ngrams,
            "edges": {f"{a},{b}": e for (a, b), e in self.result.edges.items()},
            "collection_bytes": self.memory_bytes,
            "info": dict(self.result.info, **self.info),
        }
        if self.perfect is not None:
            found = {d.string for d in self.result.discovered}
            perfect = {d.string for d in self.perfect}
            out["perfect_dictionary"] = {
                "discovered": [d.to_dict() for d in self.perfect],
                "recall": len(found & perfect) / len(perfect) if perfect else None,
                "precision": len(found & perfect) / len(found) if found else None,
            }
        return out


def run_discovery(scheme: DiscoveryScheme, strings: Sequence[str], probabilities: np.ndarray, n: int, seed: int,
                  *, compare: bool = False, log: Callable[[str], None] | None = None,
                  **options: Any) -> DiscoveryRun:
    """Simulate, discover (``options`` go to :func:`discover`), score; ``compare``: also decode with the perfect
    dictionary. ``log`` receives one line per stage with its time."""
    rng = np.random.default_rng(seed)
    shape = scheme.shape
    truth = {shape.unpadded(shape.padded(s)) for s in strings}
    began = time.perf_counter()
    collection = simulate_collection(scheme, strings, probabilities, n, rng)
    simulated = time.perf_counter() - began
    if log:
        log(f"simulate: {simulated:.2f} s ({n} clients)")
    result = discover(collection, scheme, **options)
    if log:
        for stage in ("ngrams", "pairs", "cliques", "final"):
            log(f"{stage}: {result.seconds[stage]:.2f} s")
        log(f"decode: {result.seconds['decode']:.2f} s")
    found = {d.string for d in result.discovered}
    perfect = None
    if compare:
        perfect, _est = decode_full(collection, scheme, sorted({shape.padded(s) for s in strings}),
                                    options.get("correction", "bh"), options.get("alpha", 0.10))
    seconds = {"simulate": simulated, **result.seconds}
    return DiscoveryRun(result, len(found & truth), len(found - truth), seconds, perfect,
                        collection.memory_bytes())


# -- the report file ---------------------------------------------------------------------------------------
#
# A numpy ``.npz`` archive (``numpy.savez_compressed``) with the arrays of
# :class:`~ldpstream.estimators.discovery.reports.ClientReports`, bits packed 8 to a byte (``numpy.packbits``,
# big-endian within a byte, along the last axis):
#
# ``scheme``         0-d unicode: JSON of ``DiscoveryScheme.parameters()`` (length, ngram, alphabet, pad, the
#                    full and n-gram mechanisms' parameters)
# ``slots``          (n, 2) int64: each client's two n-gram slots
# ``ngram_cohorts``  (n, 2) int64; ``ngram_bits`` (n, 2, ceil(k_n/8)) uint8
# ``full_cohorts``   (n,) int64;   ``full_bits`` (n, ceil(k_f/8)) uint8


def save_reports(path: str | Path, scheme: DiscoveryScheme, reports: ClientReports) -> None:
    """Write ``reports`` and the scheme that made them to the report file format (comment above)."""
    np.savez_compressed(
        path, scheme=np.array(json.dumps(scheme.parameters())), slots=reports.slots,
        ngram_cohorts=reports.ngram_cohorts, ngram_bits=np.packbits(reports.ngram_bits.astype(bool), axis=-1),
        full_cohorts=reports.full_cohorts, full_bits=np.packbits(reports.full_bits.astype(bool), axis=-1))


def load_reports(path: str | Path) -> tuple[DiscoveryScheme, ClientReports]:
    """Read a report file (comment above); a missing array or a shape that does not fit is a ParameterError."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            params = json.loads(str(archive["scheme"]))
            shape = StringShape(int(params["length"]), int(params["ngram"]), str(params["alphabet"]),
                                str(params["pad"]))
            full = make_mechanism(params["full"])
            ngram = make_mechanism(params["ngram_report"])
            for mech in (full, ngram):
                refusal = carrier_error(mech)
                if refusal is not None:
                    raise ParameterError(f"the report file's {refusal}")
            assert isinstance(full, BitMechanism) and isinstance(ngram, BitMechanism)  # checked above
            scheme = DiscoveryScheme(shape, full, ngram)
            slots = np.asarray(archive["slots"], dtype=np.int64)
            n = len(slots)
            reports = ClientReports(
                slots, np.asarray(archive["ngram_cohorts"], dtype=np.int64),
                np.unpackbits(archive["ngram_bits"], axis=-1, count=ngram.k).astype(bool),
                np.asarray(archive["full_cohorts"], dtype=np.int64),
                np.unpackbits(archive["full_bits"], axis=-1, count=full.k).astype(bool))
    except (KeyError, ValueError, TypeError) as exc:
        raise ParameterError(f"{path}: not a discovery report file ({exc})") from None
    if not (slots.shape == (n, 2) and reports.ngram_cohorts.shape == (n, 2)
            and reports.ngram_bits.shape == (n, 2, ngram.k) and reports.full_cohorts.shape == (n,)
            and reports.full_bits.shape == (n, full.k)):
        raise ParameterError(f"{path}: arrays of inconsistent shapes")
    if n and (slots.min() < 0 or slots.max() >= shape.slots or np.any(slots[:, 0] == slots[:, 1])):
        raise ParameterError(f"{path}: slots must be two distinct values in 0..{shape.slots - 1}")
    for name, cohorts, mech in (("ngram", reports.ngram_cohorts, ngram), ("full", reports.full_cohorts, full)):
        if cohorts.size and (cohorts.min() < 0 or cohorts.max() >= mech.cohorts):
            raise ParameterError(f"{path}: {name} cohorts outside 0..{mech.cohorts - 1}")
    return scheme, reports
