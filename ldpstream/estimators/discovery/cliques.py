"""k-cliques of a k-partite graph: the candidate strings of discovery (Fanti, Pihur, Erlingsson 2016 §5.A;
docs/math/dictionary.md, stage 4).

Part j holds the n-grams kept at slot j; an edge joins two n-grams of different slots whose pair passed the
threshold. A k-clique (one vertex per part, every two joined) is a candidate string.

**Algorithm: ordered extension with candidate-set intersection.** Parts are visited in increasing size. A
partial clique carries the bitset of the vertices adjacent to all its members (the AND of their adjacency
rows, Python integers as bitsets); its extensions in the next part are that bitset restricted to the part, and
a partial clique is abandoned as soon as some later part has no vertex left in it (forward checking). Each
partial clique that is explored extends to a clique in every part visited so far, so the work is bounded by
the number of partial cliques (plus one bitset AND per candidate vertex), never by the product of the part
sizes as brute force over all combinations is. ``limit`` caps the number of cliques returned (the graph of a
too-low threshold can hold exponentially many).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ldpstream.errors import ParameterError

__all__ = ["CliqueLimitError", "k_partite_cliques"]


class CliqueLimitError(ParameterError):
    """More cliques than the stated limit: the pair threshold is too low for this graph."""


def _bits(indices: np.ndarray, offset: int) -> int:
    out = 0
    for i in indices.tolist():
        out |= 1 << (offset + int(i))
    return out


def k_partite_cliques(sizes: Sequence[int], edges: Mapping[tuple[int, int], np.ndarray],
                      limit: int = 1_000_000) -> np.ndarray:
    """``(m, k)`` int64: every k-clique as the vertex index chosen in each part (rows sorted).

    ``sizes[j]``: vertices of part j; ``edges[(a, b)]`` (a < b): ``(sizes[a], sizes[b])`` bool adjacency
    between parts a and b (a missing pair has no edges). Raises :class:`CliqueLimitError` past ``limit``."""
    k = len(sizes)
    if k == 0:
        return np.zeros((0, 0), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    adjacency = [0] * int(offsets[-1])
    for (a, b), matrix in edges.items():
        m = np.asarray(matrix, dtype=bool)
        if not (0 <= a < b < k) or m.shape != (sizes[a], sizes[b]):
            raise ParameterError(f"edges[{(a, b)}]: need a < b < {k} and shape {(sizes[a], sizes[b])}")
        for u in range(sizes[a]):
            adjacency[offsets[a] + u] |= _bits(np.flatnonzero(m[u]), int(offsets[b]))
        for v in range(sizes[b]):
            adjacency[offsets[b] + v] |= _bits(np.flatnonzero(m[:, v]), int(offsets[a]))
    part_bits = [((1 << int(sizes[j])) - 1) << int(offsets[j]) for j in range(k)]
    order = sorted(range(k), key=lambda j: (sizes[j], j))
    found: list[list[int]] = []
    chosen = [0] * k
    # iterative depth-first search: stack of (depth, mask of vertices adjacent to every chosen one)
    everything = (1 << int(offsets[-1])) - 1
    stack: list[tuple[int, int, int]] = [(0, everything, -1)]
    while stack:
        depth, mask, vertex = stack.pop()
        if vertex >= 0:
            chosen[order[depth - 1]] = vertex
        if depth == k:
            found.append([chosen[j] - int(offsets[j]) for j in range(k)])
            if len(found) > limit:
                raise CliqueLimitError(f"more than {limit} cliques: raise the pair threshold")
            continue
        part = order[depth]
        candidates = mask & part_bits[part]
        while candidates:
            low = candidates & -candidates
            v = low.bit_length() - 1
            candidates ^= low
            nxt = mask & adjacency[v]
            if all(nxt & part_bits[order[d]] for d in range(depth + 1, k)):
                stack.append((depth + 1, nxt, v))
    if not found:
        return np.zeros((0, k), dtype=np.int64)
    out = np.array(found, dtype=np.int64)
    return out[np.lexsort(out.T[::-1])]
