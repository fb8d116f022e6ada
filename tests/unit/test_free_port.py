"""testing.daemons.free_port: the port it hands out stays reserved for the daemon told
it, so another suite on the machine cannot take it before that daemon binds it."""
from __future__ import annotations

import socket

import pytest

from testing.daemons import free_port


def test_a_handed_out_port_is_refused_to_others_and_open_to_its_daemon():
    port = free_port()
    # another program binding it (as a port picked the old way would be) is refused
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", port))
    # the kernel hands it to no one asking for any free port
    taken = []
    for _ in range(2000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            taken.append(s.getsockname()[1])
    assert port not in taken
    # the daemon told the port binds and listens on it (Go's servers, http.server and
    # tornado set SO_REUSEADDR), and nothing answers there before it does
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))
    for _ in range(2):      # and again after a restart
        with socket.socket() as daemon:
            daemon.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            daemon.bind(("127.0.0.1", port))
            daemon.listen()
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
