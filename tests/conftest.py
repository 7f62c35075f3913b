"""The integration fixtures (``services``, ``kafka_bootstrap``, ``redis_url``, ``key_prefix``,
``fresh_topic``, ``service_config``) come from the :mod:`ldpstream.testing` plugin, which the package
registers with pytest; see the README's "Tests" section."""
