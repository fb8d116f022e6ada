"""The Prometheus range reader's step grid, how a long range is split into queries, and how
those queries are asked one ahead."""
from __future__ import annotations


def test_step_and_chunks():
    from gpulse.sources.prom import chunks, choose_step
    assert choose_step(0, 3600, 15.0) == 15.0          # never finer than the scrape interval
    assert choose_step(0, 4 * 3600, 1.0) == 4.0        # about 4000 columns
    assert choose_step(0, 30 * 86400, None) == 60.0    # coarser ranges are split instead
    parts = chunks(0.0, 100.0, 1.0, 11)
    assert parts[0] == (0.0, 10.0) and parts[-1][1] == 100.0
    assert all(b < c for (_, b), (c, _) in zip(parts, parts[1:]))          # no step fetched twice
    assert sum(int(b - a) + 1 for a, b in parts) == 101                   # and none missed


def test_grid_reads_like_the_mapping_it_replaces():
    from gpulse.sources.prom import Grid
    g = Grid(1000.0, 15.0, 4)
    g.put_all([[1000, "1"], [1030.0, "3.5"], [1075, "9"], [985, "7"]])   # the last two: off the grid
    assert [g.get(t) for t in (1000.0, 1015.0, 1030.0, 1045.0)] == [1.0, None, 3.5, None]
    assert g.get(1015.0, -1.0) == -1.0 and g.get(5000.0) is None
    assert g.values() == [1.0, 3.5]


class _Scripted:
    """A Prometheus that answers each query_range with the query's own text as its one
    series' label, and refuses the query named `bad`; it tells the test which queries
    it has been asked (an Event per query), so nothing here waits on the clock."""

    def __init__(self, bad: str = ""):
        import json
        import threading
        from testing.httpstub import StubServer
        self.asked: dict[str, threading.Event] = {}

        def answer(path: str, params: dict[str, str]) -> tuple[int, bytes]:
            q = params["query"]
            self.asked.setdefault(q, threading.Event()).set()
            if q == bad:
                return 400, json.dumps({"status": "error", "errorType": "bad_data", "error": f"cannot run {q}"}).encode()
            return 200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"q": q}, "values": [[0, "1"]]}]}}).encode()

        self.server = StubServer(answer)
        self.url = self.server.url

    def was_asked(self, q: str) -> bool:
        import threading
        return self.asked.setdefault(q, threading.Event()).wait(60)

    def stop(self):
        self.server.close()


def test_ranges_ahead_answers_in_order_and_asks_the_next_while_one_is_read():
    from gpulse.sources.prom import PromClient
    srv = _Scripted()
    try:
        asks = [(f"q{i}", 0.0, 60.0) for i in range(5)]
        answers = PromClient(srv.url).ranges_ahead(asks, 15.0)
        got = []
        for i, result in enumerate(answers):
            got.append(result[0]["metric"]["q"])
            if i + 1 < len(asks):
                # the next query is asked before this answer is done with: it is ahead
                assert srv.was_asked(f"q{i + 1}")
        assert got == [q for q, _, _ in asks]
    finally:
        srv.stop()


def test_ranges_ahead_raises_a_refused_query_where_it_comes_and_stops_asking_when_closed():
    import threading

    import pytest

    from gpulse.sources.base import SourceError
    from gpulse.sources.prom import PromClient
    srv = _Scripted(bad="q2")
    try:
        answers = PromClient(srv.url).ranges_ahead([(f"q{i}", 0.0, 60.0) for i in range(5)], 15.0)
        assert [next(answers)[0]["metric"]["q"] for _ in range(2)] == ["q0", "q1"]
        with pytest.raises(SourceError, match="Prometheus rejected the query .bad_data.: cannot run q2"):
            next(answers)
        assert "q3" not in srv.asked       # nothing is asked past a refused query
        # closed early: its thread ends
        early = PromClient(srv.url).ranges_ahead([(f"r{i}", 0.0, 60.0) for i in range(50)], 15.0)
        next(early)
        early.close()
        threads = [t for t in threading.enumerate() if t.name == "gpulse-prometheus-ahead"]
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert len(srv.asked) < 2 + 3 + 50 and "r49" not in srv.asked
    finally:
        srv.stop()
