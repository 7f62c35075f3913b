"""Named distributions over a finite support ``0..S-1`` and population sampling helpers.

A distribution is given on the command line as a short *spec* string and turned into a probability vector
by :func:`parse_distribution`:

=================  ============================================================================================
spec               probability vector ``p`` (length S, non-negative, sums to 1)
=================  ============================================================================================
``uniform``        ``p_i = 1/S``
``geometric``      ``p_i ∝ θ(1 − θ)^i`` with ``θ = 1/(1 + S/5)`` (Kairouz et al. 2016, Figure 3;
                   docs/math/tuning.md#the-figure-3-setting). ``geometric:T`` uses ``θ = T`` instead (``0 < T < 1``).
``zipf:A``         ``p_i ∝ (i + 1)^(−A)``, ``A >= 0`` (``zipf`` alone: ``A = 1``)
``step:K``         a staircase of K flat steps: the support cut into K consecutive blocks of (nearly) equal
                   size, every value of block b = 0..K−1 with weight ``K − b`` (``1 <= K <= S``; K = 1 is uniform)
``binomial:P``     ``p_i = C(S−1, i) P^i (1 − P)^(S−1−i)``, the Binomial(S − 1, P) pmf, ``0 <= P <= 1``
``dirichlet:A``    one draw from the symmetric Dirichlet(A, …, A), ``A > 0``; needs a random generator
``file:PATH``      one non-negative weight per line (blank lines and ``#`` comments ignored), normalized;
                   the file must hold exactly S weights
=================  ============================================================================================

Every spec is validated at this boundary and errors are :class:`~ldpstream.errors.ParameterError` with a
message that names the spec (and, for files, the line).

Sampling: a population of ``n`` clients with values i.i.d. from ``p`` is summarized by its count vector,
``Multinomial(n, p)`` (:func:`sample_counts`); the *empirical distribution* of the sample is
``counts / n`` (:func:`empirical_distribution`). Simulations compare decoded distributions with both the
empirical and the true distribution. :func:`sample_values` draws the individual values when a path needs
them (e.g. to encode one report per client).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from ldpstream.errors import ParameterError

#: Spec names accepted by :func:`parse_distribution` (for ``--help`` texts).
DISTRIBUTION_NAMES: tuple[str, ...] = (
    "uniform", "geometric", "zipf:A", "step:K", "binomial:P", "dirichlet:A", "file:PATH")


def _check_support(support: int) -> int:
    if isinstance(support, bool) or not isinstance(support, int | np.integer) or int(support) < 1:
        raise ParameterError(f"support must be an integer >= 1, got {support!r}")
    return int(support)


def _parse_float(spec: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ParameterError(f"distribution {spec!r}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ParameterError(f"distribution {spec!r}: {what} must be finite, got {text!r}")
    return value


def normalize(weights: np.ndarray, what: str = "weights") -> np.ndarray:
    """``weights / weights.sum()`` after checking they are finite, non-negative and not all zero."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ParameterError(f"{what} must be a non-empty vector, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ParameterError(f"{what} must be finite")
    if np.any(w < 0):
        raise ParameterError(f"{what} must be non-negative (first negative at index {int(np.argmax(w < 0))})")
    total = w.sum()
    if total <= 0:
        raise ParameterError(f"{what} must not all be zero")
    return np.asarray(w / total, dtype=np.float64)


def uniform(support: int) -> np.ndarray:
    """``p_i = 1/S``."""
    S = _check_support(support)
    return np.full(S, 1.0 / S)


def geometric(support: int, theta: float | None = None) -> np.ndarray:
    """Truncated geometric ``p_i ∝ θ(1 − θ)^i``, i = 0..S−1, default ``θ = 1/(1 + S/5)``.

    The default is the distribution of Kairouz et al. 2016, Figure 3 (docs/math/tuning.md#the-figure-3-setting):
    at S = 256 and n = 10^6 it gives the figure's non-private ℓ1 baseline ≈ 0.0105.
    """
    S = _check_support(support)
    t = 1.0 / (1.0 + S / 5.0) if theta is None else float(theta)
    if not 0.0 < t < 1.0:
        raise ParameterError(f"geometric: theta must be in (0, 1), got {t}")
    # log-space so large S does not underflow to an all-zero vector
    log_w = np.arange(S) * math.log1p(-t)
    return normalize(np.exp(log_w - log_w.max()), "geometric weights")


def zipf(support: int, a: float = 1.0) -> np.ndarray:
    """Zipf law ``p_i ∝ (i + 1)^(−a)``, ``a >= 0`` (a = 0 is uniform)."""
    S = _check_support(support)
    if not a >= 0:
        raise ParameterError(f"zipf: exponent must be >= 0, got {a}")
    return normalize(np.arange(1, S + 1, dtype=np.float64) ** (-float(a)), "zipf weights")


def step(support: int, steps: int) -> np.ndarray:
    """K flat steps: block ``b = floor(i·K/S)`` of the support has weight ``K − b`` per value (module table)."""
    S = _check_support(support)
    if not 1 <= steps <= S:
        raise ParameterError(f"step: the number of steps must lie in 1..{S}, got {steps}")
    block = (np.arange(S) * steps) // S
    return normalize((steps - block).astype(np.float64), "step weights")


def binomial(support: int, prob: float) -> np.ndarray:
    """Binomial(S − 1, P) pmf over 0..S−1."""
    S = _check_support(support)
    if not 0.0 <= prob <= 1.0:
        raise ParameterError(f"binomial: P must be in [0, 1], got {prob}")
    return normalize(stats.binom.pmf(np.arange(S), S - 1, float(prob)), "binomial pmf")


def dirichlet(support: int, alpha: float, rng: np.random.Generator | None) -> np.ndarray:
    """One draw from the symmetric Dirichlet(α, …, α) over S symbols (needs ``rng``)."""
    S = _check_support(support)
    if not alpha > 0:
        raise ParameterError(f"dirichlet: alpha must be > 0, got {alpha}")
    if rng is None:
        raise ParameterError("dirichlet: a random generator is needed (pass rng=np.random.default_rng(seed))")
    draw = rng.dirichlet(np.full(S, float(alpha)))
    if not np.isfinite(draw).all() or draw.sum() <= 0:  # tiny alpha can underflow every component
        draw = np.zeros(S)
        draw[rng.integers(S)] = 1.0
    return normalize(draw, "dirichlet draw")


def from_file(path: str | Path, support: int | None = None) -> np.ndarray:
    """Weights read from a text file (one per line; blank lines and ``#`` comments ignored), normalized.

    Raises :class:`ParameterError` naming the file and line on a missing file, a non-numeric,
    negative or non-finite weight, an all-zero file, or a count different from ``support``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ParameterError(f"distribution file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError(f"distribution file {str(path)!r} cannot be read: {exc}") from None
    weights: list[float] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip().strip('"').strip()
        if not line:
            continue
        try:
            w = float(line)
        except ValueError:
            raise ParameterError(f"{path}:{lineno}: expected one number per line, got {raw.strip()!r}") from None
        if not math.isfinite(w) or w < 0:
            raise ParameterError(f"{path}:{lineno}: weights must be finite and >= 0, got {raw.strip()!r}")
        weights.append(w)
    if not weights:
        raise ParameterError(f"distribution file {str(path)!r} holds no weights")
    if support is not None and len(weights) != int(support):
        raise ParameterError(f"distribution file {str(path)!r} holds {len(weights)} weights, support is {support}")
    if sum(weights) <= 0:
        raise ParameterError(f"distribution file {str(path)!r}: weights are all zero")
    return normalize(np.asarray(weights), f"weights in {path}")


def parse_distribution(spec: str, support: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """The probability vector (length ``support``) named by ``spec`` (see the module docstring's table).

    >>> parse_distribution("uniform", 4)
    array([0.25, 0.25, 0.25, 0.25])
    >>> round(float(parse_distribution("binomial:0.5", 3)[1]), 12)
    0.5
    """
    S = _check_support(support)
    if not isinstance(spec, str) or not spec.strip():
        raise ParameterError(f"distribution spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    name, sep, arg = spec.partition(":")
    name = name.strip().lower()
    if name == "file":
        if not arg:
            raise ParameterError("distribution 'file:PATH' needs a path")
        return from_file(arg, S)
    arg = arg.strip()
    if name == "uniform":
        if sep:
            raise ParameterError(f"distribution {spec!r}: 'uniform' takes no parameter")
        return uniform(S)
    if name == "geometric":
        return geometric(S, _parse_float(spec, arg, "theta") if sep else None)
    if name == "zipf":
        return zipf(S, _parse_float(spec, arg, "exponent A") if sep else 1.0)
    if name == "step":
        count = _parse_float(spec, arg, "K") if sep else float("nan")
        if not (math.isfinite(count) and count == int(count)):
            raise ParameterError(f"distribution {spec!r}: write step:K with a whole number K")
        return step(S, int(count))
    if name in ("binomial", "dirichlet") and not sep:
        raise ParameterError(f"distribution {spec!r}: write {name}:{'P' if name == 'binomial' else 'A'}")
    if name == "binomial":
        return binomial(S, _parse_float(spec, arg, "P"))
    if name == "dirichlet":
        return dirichlet(S, _parse_float(spec, arg, "alpha"), rng)
    raise ParameterError(f"unknown distribution {spec!r}; expected one of: {', '.join(DISTRIBUTION_NAMES)}")


# ---------------------------------------------------------------------------------------------------------
# Population sampling
# ---------------------------------------------------------------------------------------------------------


def sample_counts(p: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Counts of ``n`` i.i.d. draws from ``p``: one ``Multinomial(n, p)`` draw, int64, length S."""
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ParameterError(f"n must be a non-negative integer, got {n!r}")
    p = np.asarray(p, dtype=np.float64)
    # multinomial rejects vectors whose sum exceeds 1 by rounding; renormalize defensively
    return rng.multinomial(int(n), p / p.sum()).astype(np.int64, copy=False)


def sample_values(p: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` i.i.d. symbol indices drawn from ``p`` (int64), by inverse-CDF search (vectorized)."""
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ParameterError(f"n must be a non-negative integer, got {n!r}")
    p = np.asarray(p, dtype=np.float64)
    cdf = np.cumsum(p / p.sum())
    cdf[-1] = 1.0
    return np.searchsorted(cdf, rng.random(int(n)), side="right").astype(np.int64)


def values_from_counts(counts: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """The ``sum(counts)`` individual values with ``counts[i]`` copies of ``i`` (shuffled when ``rng``)."""
    values = np.repeat(np.arange(len(counts), dtype=np.int64), np.asarray(counts, dtype=np.int64))
    if rng is not None:
        rng.shuffle(values)
    return values


def empirical_distribution(counts: np.ndarray) -> np.ndarray:
    """``counts / sum(counts)`` (the sample's empirical distribution); all zeros for an empty sample."""
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    return c / total if total > 0 else np.zeros_like(c)


def candidate_strings(support: int, prefix: str = "s") -> list[str]:
    """The open-alphabet stand-ins for symbols 0..S−1: ``["s0", "s1", ..., "s{S-1}"]``."""
    return [f"{prefix}{i}" for i in range(_check_support(support))]
