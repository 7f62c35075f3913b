"""ldpstream: streaming aggregation of locally differentially private reports.

The kernel every part shares lives here: the privatization mechanisms and their exact channels
(:mod:`ldpstream.mechanisms`), the report wire format (:mod:`ldpstream.wire`), the metric registry
(:mod:`ldpstream.registry`), the pure estimators (:mod:`ldpstream.estimators`), the sketch-store contract
(:mod:`ldpstream.store`), the service configuration (:mod:`ldpstream.config`) and the error types
(:mod:`ldpstream.errors`). The roles build on it: :mod:`ldpstream.producers` (the client SDK),
:mod:`ldpstream.consumers`, :mod:`ldpstream.decoder`, :mod:`ldpstream.simulation`,
:mod:`ldpstream.interop`; operations (:mod:`ldpstream.deploy`) and the CLI (:mod:`ldpstream.cli`) sit on top.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ldpstream")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
