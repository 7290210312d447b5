"""The HAProxy gateway in front of a lab's servers: per-tenant and per-route pools, canary shares,
one-step rollback, all changed live through HAProxy's runtime API (never a reload).

``routing`` (the routing as a value), ``config`` (haproxy.cfg and its maps), ``manifests`` (the
same routing as Gateway API objects), ``runtime`` (the stats-socket client), ``controller``
(set / weight / rollback as events), ``launch`` (servers and HAProxy, started and stopped together).
"""
