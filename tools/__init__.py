"""Development tooling, run from a checkout and not installed with ldpstream: a private Docker engine
(:mod:`tools.engine`) and the container images built without a registry (:mod:`tools.images`), which CI's
container phase uses (``python -m tools.engine up``, ``python -m tools.images``)."""
