"""The producer side: the client SDK an application embeds (:class:`LdpClient`), the Kafka publisher under it
(:class:`ReportPublisher`, :class:`DeliveryStats`), and the device secret (:func:`load_or_create_secret`).

>>> from ldpstream.producers import LdpClient                                          # doctest: +SKIP
"""

from ldpstream.producers.client import LdpClient, load_or_create_secret
from ldpstream.producers.publisher import DeliveryStats, ReportPublisher

__all__ = ["DeliveryStats", "LdpClient", "ReportPublisher", "load_or_create_secret"]
