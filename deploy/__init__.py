"""The deployment: the local stack (:mod:`.stack`, its processes in :mod:`.daemons`, the secured stack and the
Redis Cluster beside it), the test fixtures' containers and a local Prometheus; the deployment files (compose,
Kubernetes, Prometheus, Grafana) live beside them in the repository."""
