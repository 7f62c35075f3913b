"""Discovery of unknown dictionaries from n-gram reports (Fanti, Pihur, Erlingsson 2016 §5;
docs/math/dictionary.md): the string shape (:mod:`.strings`), the client's reports and budget
(:mod:`.scheme`, :mod:`.client`), a population's reports and their aggregate (:mod:`.reports`), the k-partite
cliques (:mod:`.cliques`) and the decoding stages (:mod:`.decode`)."""

from .cliques import CliqueLimitError, k_partite_cliques
from .decode import DiscoveredString, DiscoveryResult, decode_full, discover
from .reports import ClientReports, DiscoveryCollection, draw_slots, encode_population
from .scheme import (
    NGRAM_REPORTS,
    BitReports,
    DiscoveryScheme,
    bit_scheme,
    rappor_for_epsilon,
    rappor_scheme,
    report_for_epsilon,
    scheme_of,
)
from .strings import DEFAULT_ALPHABET, DEFAULT_PAD, StringShape

__all__ = [
    "DEFAULT_ALPHABET", "DEFAULT_PAD", "NGRAM_REPORTS", "BitReports", "ClientReports", "CliqueLimitError",
    "DiscoveredString", "DiscoveryCollection", "DiscoveryResult", "DiscoveryScheme", "StringShape", "bit_scheme",
    "decode_full", "discover", "draw_slots", "encode_population", "k_partite_cliques", "rappor_for_epsilon",
    "rappor_scheme", "report_for_epsilon", "scheme_of",
]
