"""Versioned weights: the Redis store (store.py, what the learner publishes through), the
weightserver service (server.py) and the actors' client (client.py).

Import the submodule you need: the client needs no Redis, the store no ZeroMQ.
"""
