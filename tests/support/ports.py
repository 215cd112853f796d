"""A free TCP port on loopback: the product's own helper (`ppomq.core.store.embedded`), so
the suite and the product pick ports the same way and there is one implementation."""

from ppomq.core.store.embedded import free_port

__all__ = ["free_port"]
