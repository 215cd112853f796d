"""The weightserver service: keeps a run's newest weights in memory, following Redis, and
answers actors' "newer than v?" requests. Its parts:

- service.py: `ppomq weightserver`, wiring the parts below and the exit code;
- server.py: the ROUTER socket and its serve loop, answering from the follower's cache;
- follower.py: the thread that follows the run's newest version in Redis;
- finished_marker.py: reading the run's `finished` marker as this run's end;
- parking.py: long-poll requests waiting for a newer version;
- run_end.py: who must hear of the run's end before the weightserver exits;
- metrics.py: the counters on /metrics.

The weight store it follows and the client actors ask it with are shared core
(ppomq.core.store.weight_store, ppomq.core.transport.weights_client).
"""
