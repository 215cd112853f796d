"""What every test that runs real processes and sockets needs: a free port and one way to
wait for a condition (tests never sleep to let something happen)."""

from tests.support.ports import free_port
from tests.support.waiting import wait_until

__all__ = ["free_port", "wait_until"]
