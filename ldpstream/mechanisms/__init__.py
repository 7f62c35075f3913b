"""Privatization mechanisms (client side) and their exact channels (for the decoder).

- :class:`KRR` (k-RR), :class:`KRappor` (k-RAPPOR): closed alphabets ``0..k-1``, one cohort.
- :class:`ORR` (O-RR), :class:`ORappor` (O-RAPPOR): hashing and cohorts, open (str/bytes) or closed
  (``support=S``) alphabets (Kairouz, Bonawitz, Ramage 2016).
- :class:`OLH`: optimal local hashing with a finite hash family (Wang et al. 2017), O-RR's channel with many
  cohorts and ``k = round(e^ε) + 1``; :class:`PrefixOLH`: a string's prefix at its group's length through it.
- :class:`Rappor` / :class:`RapporClient`: Google-compatible RAPPOR (Erlingsson et al. 2014).
- :class:`OUE`, :class:`HashedOUE` (O-OUE), :class:`SubsetSelection`, :class:`HadamardResponse`,
  :class:`CountMeanSketch`, :class:`HadamardCountMeanSketch`: the optimal mechanisms of Wang et al. 2017, Ye &
  Barg 2018, Acharya, Sun, Zhang 2019 and Apple 2017 (docs/math/mechanisms.md).
- :class:`MemoizedEncoder`: a real client of the first four, with a memoized permanent response (drawn from
  :class:`KeyedRandomness`) and optionally an instantaneous layer (:mod:`ldpstream.mechanisms.longitudinal`).

Every mechanism: ``encode`` (one value, :data:`SECURE` randomness), ``encode_batch`` (vectorized, any
``rng``), ``simulate_sketch`` (aggregate count sketch, exact in distribution), ``parameters()``
(round-trips through :func:`make_mechanism`). Equations: ``docs/math/mechanisms.md``.
"""

from ldpstream.mechanisms._common import check_epsilon
from ldpstream.mechanisms.base import (
    BitMechanism,
    Mechanism,
    SymbolMechanism,
    pack_bits,
    sum_bits,
    unpack_bits,
)
from ldpstream.mechanisms.cms import CountMeanSketch
from ldpstream.mechanisms.factory import MECHANISMS, make_mechanism
from ldpstream.mechanisms.hadamard import HadamardCountMeanSketch, HadamardResponse, fwht
from ldpstream.mechanisms.hashing import (
    bloom_bits,
    bloom_table,
    closed_permutation,
    orr_hash,
    orr_table,
    permutation_table,
)
from ldpstream.mechanisms.krappor import KRappor
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.longitudinal import MemoizedEncoder
from ldpstream.mechanisms.olh import OLH
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.oue import OUE, HashedOUE
from ldpstream.mechanisms.prefix_olh import PrefixOLH
from ldpstream.mechanisms.randomness import SECURE, KeyedRandomness, Randomness, SecureRandomness
from ldpstream.mechanisms.rappor import (
    Rappor,
    RapporClient,
    RapporParams,
    bit_string,
    bits_to_int,
    get_prr_masks,
    int_to_bits,
)
from ldpstream.mechanisms.rates import bit_rates, krr_channel, krr_keep_probability, rappor_rates
from ldpstream.mechanisms.subset import SubsetSelection

__all__ = [
    "KRR",
    "MECHANISMS",
    "OLH",
    "ORR",
    "OUE",
    "SECURE",
    "BitMechanism",
    "CountMeanSketch",
    "HadamardCountMeanSketch",
    "HadamardResponse",
    "HashedOUE",
    "KRappor",
    "KeyedRandomness",
    "Mechanism",
    "MemoizedEncoder",
    "ORappor",
    "PrefixOLH",
    "Randomness",
    "Rappor",
    "RapporClient",
    "RapporParams",
    "SecureRandomness",
    "SubsetSelection",
    "SymbolMechanism",
    "bit_rates",
    "bit_string",
    "bits_to_int",
    "bloom_bits",
    "bloom_table",
    "check_epsilon",
    "closed_permutation",
    "fwht",
    "get_prr_masks",
    "int_to_bits",
    "krr_channel",
    "krr_keep_probability",
    "make_mechanism",
    "orr_hash",
    "orr_table",
    "pack_bits",
    "permutation_table",
    "rappor_rates",
    "sum_bits",
    "unpack_bits",
]
