"""Google-compatible association files from a known joint distribution: the test and benchmark input of
``ldpstream rappor decode-assoc`` (docs/math/estimators.md, "Google RAPPOR association files").

Each simulated client holds one value of each of two variables, drawn from a given joint table, and
reports both in one row of the reports file, in one cohort, as Google's ``rappor_sim.py --assoc-testdata``
does: a string variable through the RAPPOR encoder of its params (Bloom filter, memoized PRR, IRR), a
boolean through the one-bit encoder (:class:`~ldpstream.mechanisms.rappor_boolean.RapporBoolean`: the value
is the Bloom bit). Every client's PRR is Google's deterministic HMAC construction
(:class:`~ldpstream.mechanisms.rappor.RapporClient`) under a secret per client *and variable*,
``HMAC-SHA256(master, "ldpstream/rappor-assoc-client/v1" ‖ var ‖ 0x00 ‖ client)`` (Google's simulator uses
the client id as the secret of both variables, so two variables whose Bloom filters coincide get the same
PRR masks; a secret per variable keeps the two responses independent, as the decoder assumes). The IRR is
vectorized over all rows with the given randomness.

:func:`write_association_files` writes what ``decode-assoc`` reads: ``reports.csv``, ``rappor-vars.csv``,
one params file per variable, and a ``map.csv`` per string variable.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.interop.rappor.assoc_reports import AssocReports, write_assoc_reports
from ldpstream.interop.rappor.maps import write_map
from ldpstream.interop.rappor.params import ParamsFile, params_path, write_params
from ldpstream.interop.rappor.schema import SchemaVariable, write_schema
from ldpstream.mechanisms import hashing
from ldpstream.mechanisms.base import unpack_bits
from ldpstream.mechanisms.rappor import Rappor, RapporClient
from ldpstream.mechanisms.rappor_boolean import BOOLEAN_LABELS

ASSOC_SECRET_PREFIX = b"ldpstream/rappor-assoc-client/v1"


def assoc_client_secret(master: bytes, var: str, client: str) -> bytes:
    """The PRR secret of ``client`` for variable ``var`` (module docstring)."""
    message = ASSOC_SECRET_PREFIX + var.encode("utf-8") + b"\x00" + client.encode("utf-8")
    return hmac.new(master, message, hashlib.sha256).digest()


@dataclass(frozen=True)
class AssocVariableSpec:
    """A variable to simulate: its name, type (``string``/``boolean``), params name and file content."""

    var: str
    var_type: str
    params_name: str
    params: ParamsFile

    def encoder_params(self) -> Rappor:
        """The RAPPOR encoder of a report: the params' own, or one bit for a boolean (Google's
        ``num_bloombits = 1``, same h, m, p, q, f)."""
        if self.var_type == "boolean":
            return Rappor(k=1, hashes=1, cohorts=self.params.m, p=self.params.p, q=self.params.q, f=self.params.f)
        return self.params.mechanism()


def encode_variable(spec: AssocVariableSpec, clients: Sequence[str], cohorts: np.ndarray, values: Sequence[Any],
                    master: bytes, rng: Any) -> np.ndarray:
    """``(n, k)`` uint8 IRR bits of one variable: per row the Bloom filter (a boolean: the value's bit) and
    the client's memoized PRR (one HMAC per row), then the IRR of all rows at once with ``rng``."""
    mech = spec.encoder_params()
    k = mech.k
    nbytes = -(-k // 8)
    prr = bytearray()
    for client, cohort, value in zip(clients, (cohorts % mech.cohorts).tolist(), values, strict=True):
        agent = RapporClient(mech, assoc_client_secret(master, spec.var, client), cohort)
        bloom = int(bool(value)) if spec.var_type == "boolean" else agent.bloom(value)
        prr += agent.prr(bloom).to_bytes(nbytes, "little")
    prr_bits = unpack_bits(np.frombuffer(bytes(prr), dtype=np.uint8).reshape(len(values), nbytes), k)
    irr: np.ndarray = mech.irr_batch(prr_bits.astype(bool), rng).astype(np.uint8)
    return irr


@dataclass(frozen=True)
class SimulatedAssociation:
    """Simulated reports with the truth: the values each client holds (indices into the label lists)."""

    reports: AssocReports
    index1: np.ndarray
    index2: np.ndarray


def simulate_association(
    spec1: AssocVariableSpec, labels1: Sequence[str], spec2: AssocVariableSpec, labels2: Sequence[str],
    joint: np.ndarray, n: int, rng: np.random.Generator, master: bytes,
) -> SimulatedAssociation:
    """``n`` clients whose value pairs are drawn from ``joint`` (``(len(labels1), len(labels2))``
    probabilities) and their reports; cohorts uniform in ``0..max(m)-1`` (each variable reduces the
    cohort modulo its own m, as ``decode_assoc.R`` does). A boolean's labels are ``FALSE``, ``TRUE``."""
    table = np.asarray(joint, dtype=np.float64)
    if table.shape != (len(labels1), len(labels2)):
        raise ParameterError(f"joint has shape {table.shape}, expected ({len(labels1)}, {len(labels2)})")
    if np.any(table < 0) or not np.isclose(table.sum(), 1.0):
        raise ParameterError("joint must be non-negative and sum to 1")
    for spec, labels in ((spec1, labels1), (spec2, labels2)):
        if spec.var_type == "boolean" and tuple(labels) != BOOLEAN_LABELS:
            raise ParameterError(f"boolean {spec.var!r}: labels must be {list(BOOLEAN_LABELS)}")
    cell = rng.choice(table.size, size=n, p=table.ravel() / table.sum())
    index1, index2 = np.divmod(cell, table.shape[1])
    clients = [f"c{i}" for i in range(n)]
    cohorts = rng.integers(0, max(spec1.params.m, spec2.params.m), size=n).astype(np.int64)
    columns = {}
    for spec, labels, index in ((spec1, labels1, index1), (spec2, labels2, index2)):
        values: list[Any] = index.tolist() if spec.var_type == "boolean" else [labels[i] for i in index.tolist()]
        columns[spec.var] = encode_variable(spec, clients, cohorts, values, master, rng)
    return SimulatedAssociation(AssocReports(clients, cohorts, columns), index1, index2)


def write_association_files(
    directory: str | Path, metric: str, specs: Sequence[AssocVariableSpec], reports: AssocReports,
    candidates: dict[str, Sequence[str]],
) -> dict[str, Path]:
    """Write ``reports.csv``, ``rappor-vars.csv``, the params file of every variable and ``<var>_map.csv``
    for every string variable (hashing ``candidates[var]``) into ``directory``; returns their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"reports": out / "reports.csv", "schema": out / "rappor-vars.csv", "params_dir": out}
    write_assoc_reports(paths["reports"], reports, [s.var for s in specs])
    write_schema(paths["schema"], [SchemaVariable(metric, s.var, s.var_type, s.params_name) for s in specs])
    for s in specs:
        write_params(params_path(out, s.params_name), s.params)
        if s.var_type == "string":
            words = list(candidates[s.var])
            table = hashing.bloom_table(words, s.params.m, s.params.h, s.params.k)
            paths[f"map:{s.var}"] = out / f"{s.var}_map.csv"
            write_map(paths[f"map:{s.var}"], words, table, s.params.k)
    return paths


__all__ = [
    "AssocVariableSpec",
    "SimulatedAssociation",
    "assoc_client_secret",
    "encode_variable",
    "simulate_association",
    "write_association_files",
]
