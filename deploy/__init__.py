"""Operations: the local stack (:mod:`.stack`) and what an operator checks first (:mod:`.status`); the deployment
files (compose, Kubernetes, Prometheus, Grafana) live beside them in the repository."""
