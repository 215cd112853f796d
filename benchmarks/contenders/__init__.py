"""Peer runners for benchmarks/e2e.py: each is a script run as its own process that trains
on CartPole-v1 until the solve criterion or its step cap and prints one JSON document
(see `common.emit`). They import nothing from ppomq, so they can run in another venv."""
