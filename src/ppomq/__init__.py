"""ppomq: distributed IMPALA-style PPO over ZeroMQ, msgpack and Redis."""

__version__ = "0.1.0"
