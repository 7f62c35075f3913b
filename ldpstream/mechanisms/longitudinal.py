"""Longitudinal privacy for k-RR, k-RAPPOR, O-RR and O-RAPPOR: RAPPOR's memoized permanent response, and
optionally its instantaneous layer, for every ε-parametrized mechanism
(docs/math/privacy-accounting.md#longitudinal-privacy-memoized-permanent-response).

Two dataclass fields of those mechanisms choose the configuration (:class:`Memoizing` reads them):

- ``memoize=False``: fresh noise at ε on every report, as a one-time mechanism: ε_1 = ε, ε_∞ = ∞ (r reports
  of one value cost rε).
- ``memoize=True, epsilon_permanent=None`` (the default): the *permanent response* — the ε channel applied
  once to the channel input (the symbol, hashed symbol, one-hot vector or Bloom filter of the value in the
  client's cohort) with randomness derived from the client's secret — is the report itself: every report
  of one value is the same, ε_1 = ε_∞ = ε.
- ``memoize=True, epsilon_permanent=E`` (E > ε): a permanent response at E, then an instantaneous layer with
  :data:`~ldpstream.mechanisms.randomness.SECURE` randomness at the ε₂ that makes the composition exactly the
  ε channel (:func:`~ldpstream.mechanisms.rates.krr_irr_epsilon`, :func:`~ldpstream.mechanisms.rates.bit_irr_epsilon`):
  ε_1 = ε, ε_∞ = E, and the reports of one value differ by the instantaneous noise.

In every configuration one report is distributed exactly as the registry's ε channel, so the estimators and
simulations (``encode_clients``, ``encode_batch``, ``simulate_sketch``: one report per fresh client, the composed
channel sampled directly) are those of the ε channel; the default configuration adds nothing to the fingerprint.

**Permanent response.** For channel input ``x`` the permanent response is the mechanism's own sampling code
(:func:`~ldpstream.mechanisms._common.krr_perturb` or :func:`~ldpstream.mechanisms._common.perturb_bits`) run
on a :class:`~ldpstream.mechanisms.randomness.KeyedRandomness` with ``key`` = the client's per-metric secret
and ``message = PRR_DOMAIN ‖ report kind ‖ input bytes`` (a symbol as be64, a bit vector packed
little-endian, :func:`~ldpstream.mechanisms.base.pack_bits`). It is a deterministic function of (secret,
input): a restarted client with the same secret gives the same permanent response; different inputs or
secrets draw from independent streams. Memoizing by the channel input (like RAPPOR's memo by Bloom filter)
means two values that hash alike in the client's cohort share one permanent response, which costs nothing:
their reports could not be told apart anyway.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms._common import (
    MEMO_CAPACITY,
    check_epsilon,
    check_int,
    check_mechanism_fields,
    krr_perturb,
    perturb_bits,
)
from ldpstream.mechanisms.base import ReportKind, pack_bits
from ldpstream.mechanisms.randomness import SECURE, KeyedRandomness, Randomness
from ldpstream.mechanisms.rates import bit_irr_epsilon, bit_rates, krr_irr_epsilon

#: Domain separation of the permanent response's HMAC messages (version 1 of this construction).
PRR_DOMAIN = b"ldpstream/permanent-response/v1\x00"

#: The parameter values under which :meth:`Memoizing.longitudinal_parameters` adds nothing (so a default
#: metric's fingerprint does not depend on these fields).
DEFAULT_MEMOIZE = True
DEFAULT_EPSILON_PERMANENT = None
_LONGITUDINAL_FIELDS = ("memoize", "epsilon_permanent")


class Memoizing(ABC):
    """Mixin of the ε-parametrized mechanisms (listed first among their bases): the dataclass's checks
    (:meth:`__post_init__`), validation and parameters of ``memoize`` / ``epsilon_permanent``, the mechanism's
    :meth:`parameters`, ε_∞, and the per-client :class:`MemoizedEncoder`.

    Subclasses give the channel input of a value in a cohort (:meth:`channel_input`) and how their ε maps to
    the ε of one unit channel (:meth:`unit_epsilon`: the k-RR ε of a symbol, or the per-bit ε of a flip).
    """

    name: ClassVar[str]
    report_kind: ClassVar[ReportKind]
    k: int
    epsilon: float
    memoize: bool
    epsilon_permanent: float | None

    @abstractmethod
    def channel_input(self, value: Any, cohort: int) -> Any:
        """The value's pre-noise input in ``cohort``: a symbol (int) or a ``(k,)`` bool vector."""

    @abstractmethod
    def unit_epsilon(self, epsilon: float) -> float:
        """The ε of the unit channel that realizes the mechanism at ``epsilon`` (k-RR's ε, or per-bit ε)."""

    def __post_init__(self) -> None:
        """The dataclass's checks: the shared fields (:func:`~ldpstream.mechanisms._common.check_mechanism_fields`),
        then :meth:`check_longitudinal`. A mechanism with fields of its own or other bounds overrides it."""
        check_mechanism_fields(self)
        self.check_longitudinal()

    def check_longitudinal(self) -> None:
        """Validate ``memoize`` and ``epsilon_permanent`` (call after ``epsilon`` is checked)."""
        if not isinstance(self.memoize, bool):
            raise ParameterError(f"memoize must be true or false, got {self.memoize!r}")
        if self.epsilon_permanent is None:
            return
        permanent = check_epsilon(self.epsilon_permanent, "epsilon_permanent")
        if not self.memoize:
            raise ParameterError("epsilon_permanent is the ε of a memoized permanent response: it needs memoize")
        if not permanent > self.epsilon:
            raise ParameterError(
                f"epsilon_permanent ({permanent:g}) must exceed epsilon ({self.epsilon:g}): the permanent response "
                "bounds all reports of a value, one report of which is ε-private"
            )
        object.__setattr__(self, "epsilon_permanent", permanent)

    def parameters(self) -> dict[str, int | float | str | bool]:
        """The channel's parameters: ``mechanism`` (the name), the dataclass fields in their declared order (``k``,
        ``epsilon``, then ``cohorts``, ``hashes``, ``support``, ``subset_size`` where declared; an optional one
        left out while None), then :meth:`longitudinal_parameters`. ``make_mechanism`` inverts it."""
        out: dict[str, int | float | str | bool] = {"mechanism": self.name}
        for declared in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, declared.name)
            if declared.name not in _LONGITUDINAL_FIELDS and value is not None:
                out[declared.name] = value
        return {**out, **self.longitudinal_parameters()}

    def longitudinal_parameters(self) -> dict[str, int | float | str | bool]:
        """``memoize`` and ``epsilon_permanent`` where they differ from their defaults (else nothing)."""
        out: dict[str, int | float | str | bool] = {}
        if self.memoize is not DEFAULT_MEMOIZE:
            out["memoize"] = self.memoize
        if self.epsilon_permanent is not DEFAULT_EPSILON_PERMANENT:
            out["epsilon_permanent"] = self.epsilon_permanent
        return out

    @property
    def epsilon_inf(self) -> float:
        """ε_∞, of any number of reports of one value by one client: ∞ without memoization (r reports cost
        rε), ``epsilon_permanent`` with an instantaneous layer, else ``epsilon`` (every report is the same)."""
        if not self.memoize:
            return math.inf
        return self.epsilon if self.epsilon_permanent is None else self.epsilon_permanent

    @property
    def stateful_client(self) -> bool:
        """A memoizing client keeps a permanent response derived from a persistent secret."""
        return self.memoize

    @property
    def layers(self) -> tuple[float, float | None]:
        """Unit-channel ε of ``(first layer, instantaneous layer or None)``: the first layer is the permanent
        response when memoizing (at ε_∞ with an instantaneous layer, else at ε) or the fresh noise at ε."""
        if self.epsilon_permanent is None:
            return self.unit_epsilon(self.epsilon), None
        first, target = self.unit_epsilon(self.epsilon_permanent), self.unit_epsilon(self.epsilon)
        if self.report_kind == "symbol":
            return first, krr_irr_epsilon(self.k, target, first)
        return first, bit_irr_epsilon(target, first)

    def perturb(self, inputs: np.ndarray, unit_epsilon: float, rng: Randomness) -> np.ndarray:
        """The unit channel at ``unit_epsilon`` applied to ``(n,)`` symbols or ``(n, k)`` bits, the mechanism's
        own sampling code (:func:`krr_perturb`, :func:`perturb_bits`)."""
        if self.report_kind == "symbol":
            return krr_perturb(np.asarray(inputs, dtype=np.int64), self.k, unit_epsilon, rng)
        q_star, p_star = bit_rates(unit_epsilon)
        return perturb_bits(inputs, q_star, p_star, rng)

    def client_encoder(self, secret: bytes, cohort: int) -> MemoizedEncoder:
        """The :class:`MemoizedEncoder` of the client with this per-metric ``secret`` and ``cohort``."""
        return MemoizedEncoder(self, secret, cohort)


@dataclass(eq=False)
class MemoizedEncoder:
    """One client's encoder for one metric: its cohort (fixed), its secret, and its permanent responses.

    :meth:`encode_report` is what the device runs (the :class:`~ldpstream.mechanisms.base.ReportEncoder`
    protocol); the configurations are those of the module docstring. ``secret`` is the client's per-metric
    secret (:class:`~ldpstream.device.ClientPrivatizer` derives it and the cohort from the device secret).
    """

    mechanism: Memoizing
    secret: bytes = field(repr=False)
    cohort: int
    #: Randomness of the fresh noise (the instantaneous layer, or the only layer without memoization):
    #: :data:`SECURE` on a device; a seeded generator only in tests.
    rng: Randomness = field(default=SECURE, repr=False)
    #: A cache of permanent responses, most recently used last. The responses are derived from the secret, so an
    #: evicted one is recomputed identically: the bound (:data:`MEMO_CAPACITY`) caps a long-lived client's memory
    #: (a string metric sees unboundedly many inputs) without changing any report.
    _memo: OrderedDict[bytes, np.ndarray] = field(default_factory=OrderedDict, repr=False, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes | bytearray) or len(self.secret) == 0:
            raise ParameterError("secret must be non-empty bytes")
        self.secret = bytes(self.secret)
        self.cohort = check_int("cohort", self.cohort, 0, getattr(self.mechanism, "cohorts", 1) - 1)

    def _input_bytes(self, channel_input: np.ndarray) -> bytes:
        if self.mechanism.report_kind == "symbol":
            return b"s" + struct.pack(">Q", int(channel_input))
        return b"b" + pack_bits(np.asarray(channel_input, dtype=bool)).tobytes()

    def permanent(self, channel_input: Any) -> np.ndarray:
        """The memoized permanent response of a channel input (a symbol, or ``(k,)`` bits): the first layer
        drawn from ``KeyedRandomness(secret, PRR_DOMAIN ‖ input bytes)``; a read-only array of shape ``()`` or
        ``(k,)``."""
        key = self._input_bytes(channel_input)
        memo = self._memo.get(key)
        if memo is not None:
            self._memo.move_to_end(key)
            return memo
        rng = KeyedRandomness(self.secret, PRR_DOMAIN + key)
        inputs = np.asarray(channel_input)[None, ...]
        memo = np.array(self.mechanism.perturb(inputs, self.mechanism.layers[0], rng)[0])
        memo.flags.writeable = False
        self._memo[key] = memo
        if len(self._memo) > MEMO_CAPACITY:
            self._memo.popitem(last=False)
        return memo

    def encode(self, value: Any) -> Any:
        """One report of ``value``: an int symbol, or ``(k,)`` bool bits."""
        mechanism = self.mechanism
        channel_input = np.asarray(mechanism.channel_input(value, self.cohort))
        first, irr = mechanism.layers
        if not mechanism.memoize:
            report = mechanism.perturb(channel_input[None, ...], first, self.rng)[0]
        elif irr is None:
            report = self.permanent(channel_input).copy()
        else:
            report = mechanism.perturb(self.permanent(channel_input)[None, ...], irr, self.rng)[0]
        return int(report) if mechanism.report_kind == "symbol" else np.asarray(report, dtype=bool)

    def encode_report(self, value: Any) -> tuple[int, Any]:
        """``(cohort, encode(value))``."""
        return self.cohort, self.encode(value)


class PermanentOnly(Memoizing):
    """:class:`Memoizing` for the mechanisms whose channel is not one unit channel per bit or symbol (OUE's
    asymmetric flips, subset selection, Hadamard response, HCMS): ``memoize`` works as for the others (the whole
    report is the permanent response, ε_1 = ε_∞ = ε; or fresh noise on every report), while an instantaneous
    layer (``epsilon_permanent``) is refused: no composition of two such channels is the one-report channel.

    Subclasses give :meth:`privatize`, their own sampling code on ``(n, …)`` channel inputs; the permanent
    response runs it on the client's :class:`~ldpstream.mechanisms.randomness.KeyedRandomness`."""

    def check_longitudinal(self) -> None:
        """``memoize`` must be a bool; ``epsilon_permanent`` must be unset (module docstring)."""
        if self.epsilon_permanent is not None:
            raise ParameterError(f"{self.name}: epsilon_permanent (an instantaneous layer) is not offered; use "
                                 "memoize = true (every report of a value is the same) or false (fresh noise)")
        super().check_longitudinal()

    def unit_epsilon(self, epsilon: float) -> float:
        """The whole report is one channel at ε."""
        return epsilon

    @abstractmethod
    def privatize(self, inputs: np.ndarray, rng: Randomness) -> np.ndarray:
        """The channel applied to ``(n,)`` symbols or ``(n, k)`` bits of :meth:`channel_input`."""

    def perturb(self, inputs: np.ndarray, unit_epsilon: float, rng: Randomness) -> np.ndarray:
        """:meth:`privatize` (one layer, at the mechanism's ε)."""
        del unit_epsilon
        return self.privatize(inputs, rng)
