"""Sample.moved copies every field positionally (it is on the path of every row of a
node's log in a job): a field added to Sample and forgotten there fails here."""
from __future__ import annotations

import dataclasses

from gpulse.model import Sample


def test_moved_keeps_every_field_and_moves_the_time():
    values = {f.name: float(i + 1) for i, f in enumerate(dataclasses.fields(Sample))}
    s = Sample(**values)
    moved = s.moved(2.5)
    assert moved == dataclasses.replace(s, t=s.t + 2.5)
    assert s.moved(-1.0).t == values["t"] - 1.0
