"""Prefix OLH: one report of a string's prefix, the prefix's length set by the client's group
(docs/math/dictionary.md#prefix-extension).

``cohorts`` = G groups × H hash functions; a client's cohort c (uniform, memoized with its secret like O-RR's) is
in group ``t = c // H``, which reports the prefix of length ``first + t·step`` of the string padded to
``length`` characters, through OLH (:class:`~ldpstream.mechanisms.olh.OLH`: k-RR over ``k`` symbols of the OLH
hash in cohort c). One report at ε, so ε₁ = ε; the sketch is one ``(G·H, k)`` table, folded like any symbol
sketch; the decoder splits it by group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import hashing
from ldpstream.mechanisms._common import check_int, to_value_list
from ldpstream.mechanisms.olh import OLH, optimal_range

#: The characters of a discovered string by default: lower-case letters, digits and ``. - /``; the pad is appended.
DEFAULT_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789.-/"
DEFAULT_PAD = "$"
#: Hash functions per group by default: with the heavy candidates' collisions removed (deflation) 1024 find as many
#: strings as 4096 at a quarter of the cost, and 8 groups × 1024 × 82 symbols (length 16, ε = 4.39) is 671,744 cells
#: per bucket (docs/math/dictionary.md#prefix-extension).
PREFIX_HASHES = 1024


@dataclass(frozen=True)
class PrefixOLH(OLH):
    """Prefix OLH over ``k`` symbols, ``cohorts`` = groups × hash functions, strings over ``characters`` (the pad
    appended) padded to ``length``."""

    name: ClassVar[str] = "prefix-olh"
    joint_member: ClassVar[bool] = False
    tuning_parameters: ClassVar[tuple[str, ...] | None] = None
    discovery_refusal: ClassVar[str | None] = "prefix OLH is its own discovery method (discovery method = \"prefix\")"

    length: int = 16
    step: int = 2
    first: int = 2
    characters: str = DEFAULT_ALPHABET
    pad: str = DEFAULT_PAD

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.support is not None:
            raise ParameterError("prefix OLH reports strings: it has no closed alphabet")
        check_int("length", self.length, 1)
        check_int("step", self.step, 1)
        check_int("first", self.first, 1, self.length)
        if (self.length - self.first) % self.step:
            raise ParameterError(f"prefix lengths {self.first}, {self.first} + {self.step}, … must end at "
                                 f"{self.length}")
        if not isinstance(self.pad, str) or len(self.pad) != 1:
            raise ParameterError(f"the pad must be one character, got {self.pad!r}")
        if not isinstance(self.characters, str) or not self.characters:
            raise ParameterError("the characters must be a non-empty string")
        if self.pad not in self.characters:
            object.__setattr__(self, "characters", self.characters + self.pad)
        if len(set(self.characters)) != len(self.characters):
            raise ParameterError("the characters repeat one")
        if self.cohorts % self.groups:
            raise ParameterError(f"cohorts ({self.cohorts}) must be a multiple of the {self.groups} groups")

    @classmethod
    def for_strings(cls, epsilon: float, hashes: int = PREFIX_HASHES, **options: Any) -> PrefixOLH:
        """The instance at ``epsilon`` with ``k = optimal_range(epsilon)`` and ``hashes`` hash functions a group."""
        length, step, first = (int(options.get(key, default)) for key, default in
                               (("length", 16), ("step", 2), ("first", 2)))
        groups = max((length - first) // max(step, 1) + 1, 1)
        return cls(k=optimal_range(epsilon), epsilon=epsilon, cohorts=hashes * groups, **options)

    @classmethod
    def examples(cls) -> tuple[PrefixOLH, ...]:
        return (cls(k=3, epsilon=1.0, cohorts=4, length=4, step=2, first=2, characters="ab"),)

    @classmethod
    def tuning_grid(cls, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
        raise ParameterError("prefix OLH is not tuned: its groups and hashes come from the discovery settings")

    @property
    def lengths(self) -> tuple[int, ...]:
        """Group t's prefix length, ``first + t·step``."""
        return tuple(range(self.first, self.length + 1, self.step))

    @property
    def groups(self) -> int:
        return len(self.lengths)

    @property
    def hashes(self) -> int:
        """Hash functions (cohorts) per group."""
        return self.cohorts // self.groups

    def padded(self, value: Any) -> str:
        """``value`` (str, or UTF-8 bytes) cut or right-padded to ``length``; a character outside
        :attr:`characters`, or the pad itself, is a ParameterError that names neither the value nor the character."""
        try:
            text = bytes(value).decode("utf-8") if isinstance(value, bytes | bytearray) else value
        except UnicodeDecodeError:
            raise ParameterError("a value is not UTF-8") from None
        if not isinstance(text, str):
            raise ParameterError(f"values must be strings, got {type(value).__name__}")
        outside = sum(c not in self.characters or c == self.pad for c in text)
        if outside:  # neither the value nor its characters in the message: it may be private
            raise ParameterError(f"a value has {outside} character(s) outside the metric's alphabet (or its pad)")
        return text[: self.length].ljust(self.length, self.pad)

    def probe_value(self, i: int) -> str:
        """The ``i``-th string over :attr:`characters` (the pad left out) in length-then-lexicographic order."""
        chars = self.characters.replace(self.pad, "")
        width = 1
        while i >= len(chars) ** width:
            i -= len(chars) ** width
            width += 1
        out = []
        for _ in range(width):
            i, r = divmod(i, len(chars))
            out.append(chars[r])
        return "".join(reversed(out))

    def group_cohorts(self, group: int) -> np.ndarray:
        """The cohort numbers of ``group``."""
        return np.arange(group * self.hashes, (group + 1) * self.hashes, dtype=np.int64)

    def channel_input(self, value: Any, cohort: int) -> int:
        """The OLH hash in ``cohort`` of the value's prefix at its group's length."""
        check_int("cohort", cohort, 0, self.cohorts - 1)
        prefix = self.padded(value)[: self.lengths[cohort // self.hashes]]
        return int(hashing.olh_table_from_keys(hashing.olh_keys([prefix]), np.asarray([cohort]), self.k)[0, 0])

    def symbol_table(self, candidates: Any = None) -> np.ndarray:
        """``(G·H, S)`` int64: each candidate's prefix hashed in each cohort of each group."""
        if candidates is None:
            raise ParameterError("prefix OLH needs a candidate list")
        padded = [self.padded(v) for v in to_value_list(candidates)]
        return np.concatenate([
            hashing.olh_table_from_keys(hashing.olh_keys([p[:length] for p in padded]), self.group_cohorts(t),
                                        self.k) for t, length in enumerate(self.lengths)])
