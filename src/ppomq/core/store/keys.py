"""Every Redis key and channel name ppomq uses, in one place.

One run is one prefix, `ppomq:{run_id}:`, so that a run can be listed, copied or deleted
with a pattern and so that one ACL pattern (`~ppomq:*`) covers all of them.

    ppomq:runs                    SET    run ids that have published (discovery)
    ppomq:{run}:weights:{v}       HASH   `header` (msgpack, proto/weights_blob.py), `blob`
    ppomq:{run}:versions          ZSET   member = score = v, for every stored version
    ppomq:{run}:latest            STRING newest published version, decimal
    ppomq:{run}:protected         SET    versions retention must keep
    ppomq:{run}:stats             (learner) what `ppomq status` reads
    ppomq:{run}:actors            (actors' heartbeats, via the learner) for `ppomq status`
    ppomq:{run}:finished          STRING (learner) JSON {"version", "env_steps", "unix"}: the
                                  run ended normally; weightservers tell actors, all exit 0
    ppomq:{run}:weights           pub/sub CHANNEL: the new version number, decimal (and
                                  the last one again with the `finished` marker)

A weights version is a HASH rather than one string so that listing reads headers only
(HGET ... header), never the blobs. The `versions` index makes listing and retention one
sorted read instead of a SCAN over the keyspace.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "ppomq"
RUNS_KEY = f"{NAMESPACE}:runs"
HEADER_FIELD = b"header"
BLOB_FIELD = b"blob"


@dataclass(frozen=True, slots=True)
class RunKeys:
    """The key names of one run."""

    run_id: str

    @property
    def prefix(self) -> str:
        return f"{NAMESPACE}:{self.run_id}:"

    def weights(self, version: int) -> str:
        return f"{self.prefix}weights:{int(version)}"

    @property
    def versions(self) -> str:
        return f"{self.prefix}versions"

    @property
    def latest(self) -> str:
        return f"{self.prefix}latest"

    @property
    def protected(self) -> str:
        return f"{self.prefix}protected"

    @property
    def stats(self) -> str:
        return f"{self.prefix}stats"

    @property
    def actors(self) -> str:
        return f"{self.prefix}actors"

    @property
    def finished(self) -> str:
        """Set by the learner when its run ends normally (total steps, duration, target)."""
        return f"{self.prefix}finished"

    @property
    def channel(self) -> str:
        """Pub/sub channel announcing each new version (channels and keys never collide)."""
        return f"{self.prefix}weights"


__all__ = ["BLOB_FIELD", "HEADER_FIELD", "NAMESPACE", "RUNS_KEY", "RunKeys"]
