"""Build a mechanism from a parameter mapping (a metric's configuration).

``make_mechanism({"mechanism": name, **params})`` inverts ``mechanism.parameters()`` for every
mechanism: ``make_mechanism(m.parameters()) == m``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import Mechanism
from ldpstream.mechanisms.cms import CountMeanSketch
from ldpstream.mechanisms.hadamard import HadamardCountMeanSketch, HadamardResponse
from ldpstream.mechanisms.krappor import KRappor
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.olh import OLH
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.oue import OUE, HashedOUE
from ldpstream.mechanisms.prefix_olh import PrefixOLH
from ldpstream.mechanisms.rappor import Rappor
from ldpstream.mechanisms.subset import SubsetSelection

#: Mechanism name (the ``"mechanism"`` key) → class: the one list of the mechanisms. Everything else (simulations,
#: the tuner, the registry, the decoders, the conformance suite :mod:`ldpstream.mechanisms.checks`) reads it and asks
#: each class what it needs (:class:`~ldpstream.mechanisms.base.Mechanism`'s class attributes), so a new mechanism is
#: its module plus one line here. The order is the one commands list them in: the direct mechanisms of a closed
#: alphabet before the hashed ones, within each the older first.
MECHANISMS: dict[str, type[Mechanism]] = {
    KRR.name: KRR,
    KRappor.name: KRappor,
    ORR.name: ORR,
    ORappor.name: ORappor,
    Rappor.name: Rappor,
    OUE.name: OUE,
    SubsetSelection.name: SubsetSelection,
    HadamardResponse.name: HadamardResponse,
    HashedOUE.name: HashedOUE,
    CountMeanSketch.name: CountMeanSketch,
    HadamardCountMeanSketch.name: HadamardCountMeanSketch,
    OLH.name: OLH,
    PrefixOLH.name: PrefixOLH,
}

#: The mechanism of a discovery metric's reports when its configuration names none (the paper's).
DEFAULT_DISCOVERY_MECHANISM: str = Rappor.name


def make_mechanism(spec: Mapping[str, Any]) -> Mechanism:
    """The mechanism described by ``spec = {"mechanism": name, **constructor parameters}``.

    Raises :class:`~ldpstream.errors.ParameterError` for an unknown name, unknown or missing
    parameters, or invalid values.
    """
    if not isinstance(spec, Mapping):
        raise ParameterError(f"a mechanism spec must be a mapping, got {type(spec).__name__}")
    params = dict(spec)
    name = params.pop("mechanism", None)
    if not isinstance(name, str):
        raise ParameterError(f"a mechanism spec needs a 'mechanism' name, one of {sorted(MECHANISMS)}")
    cls = MECHANISMS.get(name.lower())
    if cls is None:
        raise ParameterError(f"unknown mechanism {name!r}; expected one of {sorted(MECHANISMS)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ParameterError(f"unknown parameter(s) {unknown} for {name}; expected {sorted(fields)}")
    missing = sorted(
        n
        for n, f in fields.items()
        if n not in params and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise ParameterError(f"missing parameter(s) {missing} for {name}")
    return cls(**params)
