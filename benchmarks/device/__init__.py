"""Benchmarks for the GPU machine that is sometimes lent: run by learner_group.sh there."""
