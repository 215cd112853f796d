"""The shared core: what every service is built from.

Settings, models, envs, the transport (rollout sockets, CurveZMQ, the weights client), the
Redis store (the key schema, the weight store, the connection), the run dir's records and
events, metrics, and the service shell. The core imports ppomq.proto and itself, never a
service or the CLI (tests/test_layering.py holds it to that).
"""
