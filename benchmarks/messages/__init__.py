"""Rollout messages for benchmarks and tests: valid batches (`factory`) and a catalogue of
malformed ones that know why they are bad (`badmsgs`)."""
