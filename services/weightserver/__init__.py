"""The weightserver service: keeps a run's newest weights in memory, following Redis, and
answers actors' "newer than v?" requests (server.py). The weight store it follows and the
client actors ask it with are shared core (ppomq.core.store.weight_store,
ppomq.core.transport.weights_client).
"""
