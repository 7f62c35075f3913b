"""What a simulation knows and a real pipeline never does: the values its clients drew, kept beside the
estimates so that the live view, ``watch`` and ``report`` can show the truth next to them.

Not part of the production store contract (:mod:`ldpstream.store.contract`): consumers and the decoder never
read or write it. Only the load generator (``ldpstream produce``, ``ldpstream demo``) adds to it. Both stores
implement it (Redis keys ``P:truth:<name>`` and ``P:truth-strings:<name>``, :mod:`ldpstream.store.keys`);
``tests/contracts/test_truth_store.py`` runs one suite on both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np


class TruthStore(Protocol):
    """The counts simulations drew, per metric, association or discovery metric."""

    def add_truth(self, name: str, counts: np.ndarray) -> None:
        """Add ``counts`` (the values a simulation drew for metric or association ``name``: one count per value,
        or a table with one axis per member) to the truth kept beside the estimates. A truth of another shape
        (the registry changed) is replaced."""
        ...

    def truth(self, name: str) -> np.ndarray | None:
        """The counts :meth:`add_truth` added up for ``name`` (None when no simulation published any)."""
        ...

    def add_string_truth(self, name: str, counts: Mapping[str, int]) -> None:
        """Add ``counts`` (the strings a simulation drew for the discovery metric ``name``, with how many clients
        drew each) to the truth kept beside its dictionary."""
        ...

    def string_truth(self, name: str) -> dict[str, int] | None:
        """The counts :meth:`add_string_truth` added up for ``name`` (None when none)."""
        ...
