"""The package's error types.

::

    LdpStreamError
     ├── ParameterError        invalid mechanism or estimator parameters (also a ValueError)
     ├── ReportFormatError     a report that cannot be decoded (also a ValueError)
     ├── ConfigError           an invalid or inconsistent metric registry
     └── ServiceError          Kafka, Redis or the local stack failed or is unreachable
          └── StoreUnavailableError  the sketch store did not answer (a retry may succeed)
"""


class LdpStreamError(Exception):
    """Base class of every error raised by ldpstream."""


class ParameterError(LdpStreamError, ValueError):
    """A mechanism, estimator or simulation was given parameters outside their valid range."""


class ReportFormatError(LdpStreamError, ValueError):
    """A report's bytes do not follow the wire format."""


class ConfigError(LdpStreamError):
    """The metric registry is invalid or does not match a report."""


class ServiceError(LdpStreamError):
    """A backing service (Kafka, Redis, the local stack) failed or could not be reached."""


class StoreUnavailableError(ServiceError):
    """The sketch store could not be reached or did not answer in time. Whether the last write happened is
    unknown; retrying a compare-and-set apply is safe (a batch that did land is refused the second time)."""
