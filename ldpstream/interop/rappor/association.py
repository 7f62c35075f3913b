"""From Google's association inputs to the joint estimate: what ``ldpstream rappor decode-assoc`` runs
(docs/math/estimators.md, "Google RAPPOR association files").

:func:`load_association` reads the schema row, params file, map and report column of each of the two
variables (``decode_assoc.R``'s checks and order: var1 a string with ``--map1``; var2 a boolean with
``--create-bool-map`` or, our extension, a string with ``--map2``); cohorts are reduced modulo each
variable's m as Google does. :func:`select_candidates` picks a string variable's candidates from its
marginal, as Google's ``ComputeDistributionEM`` does (the candidates its marginal decoder reports; here the
detected ones, :func:`~ldpstream.estimators.detection.detect`), largest first. :func:`decode_association`
runs the joint EM (:func:`~ldpstream.estimators.joint.estimate_joint`) over the distinct report pairs,
with an "Other" category for each string variable and none for a boolean (its two values are the whole
alphabet), a string variable's Other kept only when the test of "no mass outside its candidates" rejects
(:func:`other_test`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.candidates import decode_bits
from ldpstream.estimators.detection import detect
from ldpstream.estimators.dispatch import design_matrix
from ldpstream.estimators.joint import OTHER_LABEL, JointEstimate, JointVariable, estimate_joint
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.interop.rappor.assoc_reports import read_assoc_reports
from ldpstream.interop.rappor.maps import CandidateMap, create_bool_map, read_map
from ldpstream.interop.rappor.params import ParamsFile, read_params_dir
from ldpstream.interop.rappor.schema import VAR_TYPES, find_variable, read_schema
from ldpstream.mechanisms.base import sum_bits
from ldpstream.mechanisms.rappor_boolean import RapporBoolean

CandidateRule = Literal["detected", "all"]


@dataclass(frozen=True)
class AssocVariable:
    """One variable of an association, ready to decode: its name and type, params, candidate map (strings
    and ``(m·k, S)`` design), and the reports' ``(n, k)`` bits and cohorts (``0..m-1``)."""

    var: str
    var_type: str
    params: ParamsFile
    cmap: CandidateMap
    bits: np.ndarray
    cohorts: np.ndarray

    @property
    def k(self) -> int:
        """Bits of a report: the params' k, or 1 for a boolean."""
        return 1 if self.var_type == "boolean" else self.params.k

    def sketch(self) -> np.ndarray:
        """The ``(m, k + 1)`` bit sketch of the reports (Google's ``counts.csv``)."""
        return sum_bits(self.cohorts, self.bits, self.params.m)


@dataclass(frozen=True)
class AssocInputs:
    """Both variables and what reading them found."""

    var1: AssocVariable
    var2: AssocVariable
    num_reports: int
    removed_rows: int
    sampled: bool
    seconds: float


def load_association(
    *, schema: str | Path, reports: str | Path, params_dir: str | Path, metric: str, var1: str, var2: str,
    map1: str | Path | None, map2: str | Path | None = None, create_bool_map_flag: bool = False,
    remove_bad_rows: bool = False, sample_size: int = -1, rng: np.random.Generator | None = None,
) -> AssocInputs:
    """Read and check the inputs (module docstring); errors name the file and line, or the flag missing."""
    start = time.perf_counter()
    rows = read_schema(schema)
    row1 = find_variable(rows, metric, var1)
    row2 = find_variable(rows, metric, var2)
    if var1 == var2:
        raise ParameterError(f"--var1 and --var2 are both {var1!r}")
    if row1.var_type != "string":
        raise ParameterError(f"variable 1 should be a string ({var1} is of type {row1.var_type})")
    if row2.var_type not in VAR_TYPES:
        raise ParameterError(f"variable 2 should be a boolean or a string ({var2} is of type {row2.var_type})")
    if not map1:
        raise ParameterError(f"--map1 must be provided when --var1 is a string (var = {var1})")
    params1 = read_params_dir(params_dir, row1.params)
    params2 = params1 if row2.params == row1.params else read_params_dir(params_dir, row2.params)
    if row2.var_type == "boolean":
        if map2:
            raise ParameterError(f"--map2 given but {var2} is a boolean (use --create-bool-map)")
        if not create_bool_map_flag:
            raise ParameterError(f"pass --create-bool-map to analyze the boolean {var2}")
        cmap2 = create_bool_map(params2)
        width2 = 1
    else:
        if not map2:
            raise ParameterError(f"--map2 must be provided when --var2 is a string (var = {var2})")
        cmap2 = read_map(map2, params2)
        width2 = params2.k
    cmap1 = read_map(map1, params1)
    data = read_assoc_reports(reports, {var1: params1.k, var2: width2}, remove_bad_rows=remove_bad_rows)
    n = len(data)
    if n == 0:
        raise ParameterError(f"{reports}: no reports to analyze")
    keep = np.arange(n)
    sampled = 0 < sample_size < n
    if sampled:
        gen = rng if rng is not None else np.random.default_rng()
        keep = np.sort(gen.choice(n, size=sample_size, replace=False))
    cohorts = data.cohorts[keep]
    v1 = AssocVariable(var1, "string", params1, cmap1, data.variables[var1][keep], cohorts % params1.m)
    v2 = AssocVariable(var2, row2.var_type, params2, cmap2, data.variables[var2][keep], cohorts % params2.m)
    return AssocInputs(v1, v2, int(keep.size), data.removed, sampled, time.perf_counter() - start)


@dataclass(frozen=True)
class Candidates:
    """The candidates of one variable in the joint table: indices into its map, their labels, and the
    marginal estimate they were chosen from (``None`` for a boolean)."""

    index: np.ndarray
    labels: list[str]
    design: sp.csr_matrix
    other: bool
    marginal: Any = None
    info: dict[str, Any] = field(default_factory=dict)


def select_candidates(
    variable: AssocVariable, rule: CandidateRule = "detected", *, top: int | None = None,
    correction: str = "bh", alpha: float = 0.10,
) -> Candidates:
    """A string variable's candidates: the detected ones (``rule="detected"``, Google's choice) or every map
    string (``"all"``), largest marginal first, at most ``top``; with an "Other" category. A boolean's are
    ``FALSE`` and ``TRUE``, without "Other"."""
    if variable.var_type == "boolean":
        index = np.arange(2)
        return Candidates(index, list(variable.cmap.strings), variable.cmap.matrix, other=False)
    p = variable.params
    est = detect(variable.sketch(), variable.cmap.matrix, p.q_star, p.p_star, correction, alpha,  # type: ignore[arg-type]
                 other=True, labels=variable.cmap.strings)
    freq = np.asarray(est.frequencies)
    chosen = np.arange(freq.size) if rule == "all" else np.flatnonzero(est.significant(alpha, correction))  # type: ignore[arg-type]
    chosen = chosen[np.argsort(-freq[chosen], kind="stable")]
    if top is not None:
        if top < 1:
            raise ParameterError(f"--top must be >= 1, got {top}")
        chosen = chosen[:top]
    labels = [variable.cmap.strings[i] for i in chosen.tolist()]
    if OTHER_LABEL in labels:
        raise ParameterError(f"map of {variable.var!r}: a candidate is named {OTHER_LABEL!r}, the label of the "
                             "category of every string outside the candidates; rename it")
    info = {"rule": rule, "detected": int(np.count_nonzero(est.significant(alpha, correction))),  # type: ignore[arg-type]
            "map_strings": len(variable.cmap.strings), "correction": correction, "alpha": alpha}
    return Candidates(chosen, labels, sp.csr_matrix(variable.cmap.matrix[:, chosen]), True, est, info)


def check_map_hashing(variable: AssocVariable, candidates: Candidates) -> None:
    """Raise unless the map's bits of the chosen candidates are those Google's hashing gives them under the
    variable's params: the joint EM hashes its candidates itself (:class:`~ldpstream.mechanisms.rappor.Rappor`),
    so a map made otherwise (other params, other hashing) would be decoded against the wrong bits."""
    p = variable.params
    hashed = design_matrix(p.mechanism(), candidates.labels)
    differs = np.asarray(abs(hashed - candidates.design).sum(axis=0)).ravel()
    if np.any(differs):
        s = int(np.flatnonzero(differs)[0])
        raise ParameterError(f"map of {variable.var!r}: the bits of {candidates.labels[s]!r} are not those of "
                             f"Google's hashing with k={p.k}, h={p.h}, m={p.m} (a map of other params?)")


def joint_variable(variable: AssocVariable, candidates: Candidates) -> JointVariable:
    """The :class:`~ldpstream.estimators.joint.JointVariable` of a variable: a string variable's
    :class:`~ldpstream.mechanisms.rappor.Rappor` over its chosen candidate strings (whose map bits
    :func:`check_map_hashing` checked), with their marginal frequencies for the "Other" rule; or the boolean's
    :class:`~ldpstream.mechanisms.rappor_boolean.RapporBoolean` over its closed alphabet (0 = FALSE,
    1 = TRUE), without "Other"."""
    p = variable.params
    if variable.var_type == "boolean":
        mech = RapporBoolean(cohorts=p.m, p=p.p, q=p.q, f=p.f)
        return JointVariable(mech, [0, 1], candidates.labels, other=False)
    check_map_hashing(variable, candidates)
    freq = np.asarray(candidates.marginal.frequencies, dtype=np.float64)[candidates.index]
    return JointVariable(p.mechanism(), candidates.labels, candidates.labels, frequencies=freq.tolist(), other=True)


@dataclass(frozen=True)
class AssocResult:
    """The joint estimate with the candidates of both variables, the seconds spent choosing them from the
    marginals, and the seconds of the joint estimate (pattern collapse, likelihoods, EM, information)."""

    joint: JointEstimate
    candidates1: Candidates
    candidates2: Candidates
    marginal_seconds: float
    joint_seconds: float
    #: Each variable's test of its "Other" category (:func:`other_test`); ``None`` for a boolean, or untested.
    other_test1: OtherTest | None = None
    other_test2: OtherTest | None = None


#: A string variable keeps "Other" when the one-sided test of "no mass outside its candidates" rejects at this level.
OTHER_LEVEL = 0.05


@dataclass(frozen=True)
class OtherTest:
    """The test of ``H0``: none of a string variable's reports come from outside its candidates, by the least
    squares of its bit sketch on the candidates and the "other" column (the candidate decoders' ``ls``):
    ``z = residual / se``, one-sided ``p_value``; ``kept``: the table has the variable's Other
    (``p_value < OTHER_LEVEL``; docs/math/joint.md#is-other-there)."""

    residual: float
    std_error: float
    z: float
    p_value: float
    kept: bool

    def to_dict(self) -> dict[str, Any]:
        return {"residual": self.residual, "std_error": self.std_error, "z": self.z, "p_value": self.p_value,
                "kept": self.kept, "level": OTHER_LEVEL}


def other_test(variable: AssocVariable, candidates: Candidates) -> OtherTest:
    """:class:`OtherTest` of a string variable's chosen candidates."""
    p = variable.params
    ls = decode_bits(variable.sketch(), candidates.design, p.q_star, p.p_star, "ls", other=True)
    residual = float(ls.residual or 0.0)
    se = float(ls.residual_std_error or 0.0)
    z = residual / se if se > 0 else 0.0
    p_value = float(stats.norm.sf(z))
    return OtherTest(residual, se, z, p_value, p_value < OTHER_LEVEL)


def decode_association(
    inputs: AssocInputs, *, rule: CandidateRule = "detected", top: int | None = None, correction: str = "bh",
    alpha: float = 0.10, max_iterations: int = 1000, tolerance: float = 1e-6, test_other: bool = True,
    accelerate: bool = True,
) -> AssocResult:
    """Choose each variable's candidates from its marginal, then run the joint EM over the distinct
    report pairs (module docstring); ``test_other``: a string variable's "Other" only where :func:`other_test`
    rejects "no mass outside its candidates" (False: always)."""
    start = time.perf_counter()
    c1 = select_candidates(inputs.var1, rule, top=top, correction=correction, alpha=alpha)
    c2 = select_candidates(inputs.var2, rule, top=top, correction=correction, alpha=alpha)
    marginal_seconds = time.perf_counter() - start
    for var, cand in ((inputs.var1, c1), (inputs.var2, c2)):
        if cand.index.size == 0:
            raise ParameterError(f"no candidate of {var.var!r} is detected in its marginal: nothing to associate "
                                 "(Google's decoder stops here too; --all-candidates uses every map string)")
    start = time.perf_counter()
    patterns = PairPatterns.from_pairs(inputs.var1.cohorts, inputs.var1.bits, inputs.var2.cohorts, inputs.var2.bits)
    x, y = joint_variable(inputs.var1, c1), joint_variable(inputs.var2, c2)
    tests: list[OtherTest | None] = []
    for var, cand, joint_var in ((inputs.var1, c1, x), (inputs.var2, c2, y)):
        # a string variable's Other only when the data ask for it
        test = other_test(var, cand) if test_other and joint_var.other else None
        tests.append(test)
    if tests[0] is not None and not tests[0].kept:
        x = replace(x, other=False)
    if tests[1] is not None and not tests[1].kept:
        y = replace(y, other=False)
    joint = estimate_joint(patterns, x, y, other=True, tolerance=tolerance, max_iterations=max_iterations,
                           accelerate=accelerate)
    return AssocResult(joint, c1, c2, marginal_seconds, time.perf_counter() - start, tests[0], tests[1])
