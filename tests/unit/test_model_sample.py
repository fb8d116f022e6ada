"""Sample.moved keeps every field and moves the time (it is on the path of every row of
a node's log in a job)."""
from __future__ import annotations

from gpulse.model import Sample


def test_moved_keeps_every_field_and_moves_the_time():
    values = {name: float(i + 1) for i, name in enumerate(Sample._fields)}
    s = Sample(**values)
    moved = s.moved(2.5)
    assert moved == s._replace(t=s.t + 2.5) and type(moved) is Sample
    assert s.moved(-1.0).t == values["t"] - 1.0
