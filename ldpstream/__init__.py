"""ldpstream: streaming aggregation of locally differentially private reports.

This package holds what producers, consumers and the decoder must agree on: the privatization
mechanisms and their exact channels (:mod:`ldpstream.mechanisms`), the report wire format, the metric
registry, and the package's error types (:mod:`ldpstream.errors`).
"""

__version__ = "0.1.0"
