"""Channel operators ``Q`` (inputs × outputs, row-stochastic) for the multinomial likelihood of a sketch.

A channel maps a distribution ``p`` over inputs to output probabilities ``m = p Q``
(docs/math/estimators.md#maximum-likelihood-by-em). :class:`MatrixChannel` holds ``Q`` explicitly (dense or
sparse); :class:`AffineChannel` is a structured operator that never materializes the channel of a hashed
design; :func:`compressed_affine_channel`
merges the outputs that no candidate reaches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError

from .numerics.linalg import weighted_gram

__all__ = [
    "AffineChannel",
    "ChannelOperator",
    "MatrixChannel",
    "as_channel",
    "compressed_affine_channel",
]


class ChannelOperator(Protocol):
    """What the EM needs from a channel ``Q`` (inputs × outputs)."""

    @property
    def n_inputs(self) -> int: ...

    @property
    def n_outputs(self) -> int: ...

    def forward(self, p: np.ndarray) -> np.ndarray:
        """``m = p Q`` (length n_outputs)."""
        ...

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        """``Q w`` (length n_inputs)."""
        ...

    def information(self, d: np.ndarray) -> np.ndarray:
        """Dense ``Q diag(d) Qᵀ`` (n_inputs × n_inputs)."""
        ...


class MatrixChannel:
    """A channel given explicitly as a dense or sparse (inputs × outputs) matrix."""

    def __init__(self, Q: ArrayLike | sp.spmatrix | sp.sparray) -> None:
        self.Q = sp.csr_matrix(Q) if sp.issparse(Q) else np.asarray(Q, dtype=np.float64)
        if self.Q.ndim != 2:
            raise ParameterError("channel must be a 2-D (inputs x outputs) matrix")

    @property
    def n_inputs(self) -> int:
        return int(self.Q.shape[0])

    @property
    def n_outputs(self) -> int:
        return int(self.Q.shape[1])

    def forward(self, p: np.ndarray) -> np.ndarray:
        return np.asarray(self.Q.T @ p).ravel()

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        return np.asarray(self.Q @ w).ravel()

    def information(self, d: np.ndarray) -> np.ndarray:
        if sp.issparse(self.Q):
            return weighted_gram(sp.csr_matrix(self.Q.T), d)
        info: np.ndarray = (self.Q * d) @ self.Q.T
        return info


class AffineChannel:
    """A channel whose transpose is stacked blocks ``A_b = diag(scale_b) X + offset_b 1ᵀ`` plus extra columns.

    ``X`` is a sparse (R × S) 0/1 design (row ``c*k + y``: cohort ``c``, symbol or bit ``y``). Output
    ``b*R + r`` has probability ``Σ_s p_s (scale_b[r] X[r, s] + offset_b[r]) + Σ_e p_e extra[b*R + r, e]``.
    The inputs are the S columns of ``X`` followed by the ``extra`` columns (e.g. an "other" string).

    - O-RR: one block, ``scale = (e^ε − 1)/(C(e^ε + k − 1))``, ``offset = 1/(C(e^ε + k − 1))``.
    - Bit mechanisms (composite likelihood): block 1 = "bit set" with ``scale = (q* − p*)/(Ck)``,
      ``offset = p*/(Ck)``; block 0 = "bit clear" with ``scale = −(q* − p*)/(Ck)``, ``offset = (1 − p*)/(Ck)``.
    """

    def __init__(
        self,
        X: sp.spmatrix | sp.sparray,
        scales: Sequence[ArrayLike],
        offsets: Sequence[ArrayLike],
        extra: ArrayLike | None = None,
    ) -> None:
        self.X: sp.csr_matrix = sp.csr_matrix(cast(Any, X), dtype=np.float64)
        self.XT = sp.csr_matrix(self.X.T)
        R = self.X.shape[0]
        if len(scales) != len(offsets) or not scales:
            raise ParameterError("need one scale and one offset per block")
        self.scales = [np.broadcast_to(np.asarray(s, dtype=np.float64), (R,)) for s in scales]
        self.offsets = [np.broadcast_to(np.asarray(o, dtype=np.float64), (R,)) for o in offsets]
        self.n_blocks = len(scales)
        # The same, stacked (blocks × R): forward and adjoint then cost a few whole-array operations whatever
        # the number of blocks (EM calls them hundreds of times per decode).
        self._scale = np.ascontiguousarray(np.stack(self.scales))
        self._offset = np.ascontiguousarray(np.stack(self.offsets))
        if extra is None:
            self.extra = np.zeros((R * self.n_blocks, 0))
        else:
            e = np.asarray(extra, dtype=np.float64)
            self.extra = e.reshape(-1, 1) if e.ndim == 1 else e
            if self.extra.shape[0] != R * self.n_blocks:
                raise ParameterError("extra columns must have one row per output")

    @property
    def n_candidates(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_inputs(self) -> int:
        return self.n_candidates + int(self.extra.shape[1])

    @property
    def n_outputs(self) -> int:
        return int(self.X.shape[0]) * self.n_blocks

    def forward(self, p: np.ndarray) -> np.ndarray:
        S = self.n_candidates
        pc = p[:S]
        xp = self.X @ pc
        total = float(pc.sum())
        m: np.ndarray = (self._scale * xp + self._offset * total).ravel()
        if self.extra.shape[1] == 1:
            m += self.extra[:, 0] * p[S]
        elif self.extra.shape[1]:
            m += np.einsum("ie,e->i", self.extra, p[S:])
        return m

    def adjoint(self, w: np.ndarray) -> np.ndarray:
        blocks = w.reshape(self.n_blocks, -1)
        sw = np.einsum("br,br->r", self._scale, blocks)
        ow = float(np.einsum("br,br->", self._offset, blocks))
        out: np.ndarray = self.XT @ sw + ow
        if self.extra.shape[1]:
            out = np.concatenate([out, np.einsum("ie,i->e", self.extra, w)])
        return out

    def information(self, d: np.ndarray) -> np.ndarray:
        """``Σ_b A_bᵀ diag(d_b) A_b`` with ``A_b`` the block's (outputs × inputs) matrix, dense."""
        R = self.X.shape[0]
        S = self.n_candidates
        blocks = d.reshape(self.n_blocks, R)
        w_gram = sum(s * s * db for s, db in zip(self.scales, blocks, strict=True))
        cross = sum(s * o * db for s, o, db in zip(self.scales, self.offsets, blocks, strict=True))
        const = float(sum(np.dot(o * o, db) for o, db in zip(self.offsets, blocks, strict=True)))
        u = self.XT @ cross
        n_in = self.n_inputs
        info = np.empty((n_in, n_in))
        info[:S, :S] = weighted_gram(self.X, w_gram)
        info[:S, :S] += u[:, None] + u[None, :] + const
        if n_in > S:
            E = self.extra
            dE = d[:, None] * E
            dE_blocks = dE.reshape(self.n_blocks, R, -1)
            xe = cast(np.ndarray, sum(s[:, None] * dEb for s, dEb in zip(self.scales, dE_blocks, strict=True)))
            oe = cast(np.ndarray, sum(o @ dEb for o, dEb in zip(self.offsets, dE_blocks, strict=True)))
            ce = self.XT @ xe + oe[None, :]
            info[:S, S:] = ce
            info[S:, :S] = ce.T
            info[S:, S:] = E.T @ dE
        return info


def as_channel(Q: ArrayLike | sp.spmatrix | sp.sparray | ChannelOperator) -> ChannelOperator:
    """Wrap a matrix as a :class:`MatrixChannel`; channel operators pass through."""
    if hasattr(Q, "forward") and hasattr(Q, "adjoint"):
        return Q  # type: ignore[return-value]
    return MatrixChannel(Q)


def channel_and_counts(
    channel: ArrayLike | sp.spmatrix | sp.sparray | ChannelOperator, counts: ArrayLike
) -> tuple[ChannelOperator, np.ndarray]:
    """The channel (:func:`as_channel`) and the output ``counts`` as a flat float64 array, checked: one count per
    output, none negative (the input of the multinomial likelihood decoders)."""
    ch = as_channel(channel)
    n = np.asarray(counts, dtype=np.float64).ravel()
    if n.size != ch.n_outputs:
        raise ParameterError(f"{n.size} counts for a channel with {ch.n_outputs} outputs")
    if np.any(n < 0):
        raise ParameterError("counts must be non-negative")
    return ch, n



def compressed_affine_channel(
    X: sp.csr_matrix,
    scales: Sequence[float],
    offsets: Sequence[float],
    extra: Sequence[float] | None,
    counts: Sequence[np.ndarray],
) -> tuple[AffineChannel, np.ndarray, float]:
    """An :class:`AffineChannel` with constant per-block ``scales``, ``offsets`` and "other" probabilities
    ``extra`` (scalars), its rows with no candidate merged into one row per block.

    Rows of ``X`` with no nonzero have the same output probability ``o_b Σp + e_b p_o`` within a block, so
    merging them (summed counts, summed offsets and extras) leaves the EM fixed-point map, the observed
    information and the maximizer unchanged; the log-likelihood drops by ``n_merged,b · log(rows merged)``
    per block, which is returned (to add back) (docs/math/estimators.md#maximum-likelihood-with-unexplained-mass).
    """
    nonempty = np.diff(X.indptr) > 0
    n_empty = int(nonempty.size - nonempty.sum())
    if n_empty == 0:
        ext = None if extra is None else np.concatenate([np.full(X.shape[0], e) for e in extra])
        return AffineChannel(X, list(scales), list(offsets), ext), np.concatenate(list(counts)), 0.0
    keep = np.flatnonzero(nonempty)
    Xc = sp.vstack([X[keep], sp.csr_matrix((1, X.shape[1]))], format="csr")
    mult = np.ones(keep.size + 1)
    mult[-1] = n_empty
    offs = [o * mult for o in offsets]
    scl = [np.full(keep.size + 1, s) for s in scales]
    ext = None if extra is None else np.concatenate([e * mult for e in extra])
    cnt = np.concatenate([np.append(c[keep], c[~nonempty].sum()) for c in counts])
    shift = float(sum(c[~nonempty].sum() for c in counts)) * np.log(n_empty)
    return AffineChannel(Xc, scl, offs, ext), cnt, -shift

