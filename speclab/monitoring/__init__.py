"""The monitoring kit for the vLLM servers users ship: Prometheus rules, their promtool tests and a
Grafana dashboard, generated from one table of PromQL expressions over vLLM 0.33's own series."""
