"""The publisher's and client SDK's error reporting, without a broker (nothing here reaches Kafka)."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.errors import ReportFormatError, ServiceError
from ldpstream.producers.client import LdpClient
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.registry import Registry

NOWHERE = "127.0.0.1:1"
QUIET = {"log_level": 0}


def test_a_delivery_failure_is_raised_by_one_flush_only_and_names_the_bootstrap():
    # Nothing listens at NOWHERE: librdkafka gives up after delivery.timeout.ms and reports a failed delivery.
    publisher = ReportPublisher(NOWHERE, delivery_timeout=1.0, config=QUIET)
    publisher.publish("t", np.zeros((3, 20), dtype=np.uint8), per_message=3)
    with pytest.raises(ServiceError, match=r"Kafka at 127\.0\.0\.1:1: 1 message\(s\) failed delivery"):
        publisher.flush(10.0)
    # That failure was reported: a later flush with nothing new failing succeeds and keeps the record of it.
    stats = publisher.flush(0.1)
    assert len(stats.errors) == 1 and "timed out" in stats.errors[0].lower() and stats.records_acked == 0


def test_publish_refuses_rows_that_are_not_a_2d_array_of_records():
    publisher = ReportPublisher(NOWHERE, config=QUIET)
    with pytest.raises(ValueError, match="2-D"):
        publisher.publish("t", np.zeros(20, dtype=np.uint8))
    with pytest.raises(ValueError, match="per_message"):
        publisher.publish("t", np.zeros((1, 20), dtype=np.uint8), per_message=0)


def test_client_refuses_an_event_time_outside_the_u32_field_instead_of_wrapping_it():
    registry = Registry.from_dict({"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}})
    client = LdpClient(registry, NOWHERE, secret=b"device-secret-0003", producer_config=QUIET)
    for bad in (-1, 2**32):
        with pytest.raises(ReportFormatError, match="event_time"):
            client.report("m", 1, event_time=bad)


def test_rappor_needs_a_persistent_device_secret_and_the_secret_file_is_created_once(tmp_path):
    from ldpstream.device import ClientPrivatizer
    from ldpstream.errors import ParameterError
    from ldpstream.producers.client import load_or_create_secret
    from ldpstream.registry import Registry

    registry = Registry.from_dict({"metrics": {"r": {"id": 1, "mechanism": "rappor", "k": 16, "hashes": 2,
                                                     "cohorts": 4, "p": 0.25, "q": 0.75, "f": 0.5}}})
    with pytest.raises(ParameterError, match="persistent secret"):
        ClientPrivatizer().privatize(registry["r"], "a")
    path = tmp_path / "device" / "secret"
    first = load_or_create_secret(path)
    assert len(first) == 32 and load_or_create_secret(path) == first
    assert (path.stat().st_mode & 0o777) == 0o600
    cohort, bits = ClientPrivatizer(first).privatize(registry["r"], "a")
    assert 0 <= cohort < 4 and bits.shape == (16,)
