"""A client's value never appears in an exception text (those end up in application logs): a value outside a
metric's alphabet is refused by what it is, not quoted."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.device import ClientPrivatizer
from ldpstream.errors import ParameterError
from ldpstream.mechanisms import KRR, ORR, KRappor, ORappor
from ldpstream.registry import Registry

SECRET_STRING = "my-diagnosis-is-XYZZY"
SECRET_NUMBER = 987654321

REGISTRY = Registry.from_dict({"metrics": {
    "labelled": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0, "labels": ["a", "b", "c", "d"]},
    "numbered": {"id": 2, "mechanism": "krappor", "k": 4, "epsilon": 1.0},
    "closed": {"id": 3, "mechanism": "orr", "k": 4, "epsilon": 1.0, "cohorts": 4, "support": 16},
}})


@pytest.mark.parametrize(("metric", "value"), [
    ("labelled", SECRET_STRING), ("labelled", SECRET_NUMBER), ("numbered", SECRET_NUMBER),
    ("numbered", SECRET_STRING), ("closed", SECRET_NUMBER), ("numbered", 3.5),
])
def test_the_sdk_core_refuses_a_value_without_quoting_it(metric, value):
    with pytest.raises(ParameterError) as caught:
        ClientPrivatizer(b"s" * 32).privatize(REGISTRY[metric], value)
    assert str(value) not in str(caught.value)


@pytest.mark.parametrize("mechanism", [KRR(k=4, epsilon=1.0), KRappor(k=4, epsilon=1.0)])
def test_mechanisms_refuse_out_of_range_symbols_without_quoting_them(mechanism):
    rng = np.random.default_rng(0)
    with pytest.raises(ParameterError) as caught:
        mechanism.encode_batch(np.array([1, SECRET_NUMBER]), rng)
    assert str(SECRET_NUMBER) not in str(caught.value) and "1 of 2" in str(caught.value)


@pytest.mark.parametrize("mechanism", [ORR(k=4, epsilon=1.0, cohorts=2, support=8),
                                       ORappor(k=8, epsilon=1.0, cohorts=2, hashes=1, support=8)])
def test_closed_hashed_mechanisms_too(mechanism):
    with pytest.raises(ParameterError) as caught:
        mechanism.encode(SECRET_NUMBER)
    assert str(SECRET_NUMBER) not in str(caught.value)
