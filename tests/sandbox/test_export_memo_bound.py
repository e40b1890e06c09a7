"""The export's pickler memo is bounded (issue 42, h5: kernel/stops._Control.memoized, kernel/pickling._Sink).

The pickler keeps a memo entry for every object it writes (a second reference to it is then written as a reference:
the copy keeps the kernel's identities, which verdicts rest on), so its memory grows with the number of objects, not
with the bytes written: a 3M-item dict of short strings pickles to 41 MiB and its memo peaks near 192 MiB
(benchmarks/export_memory_bench.py). The export wrote on with no bound but the kernel's 256 MiB floor. The sink now
counts the memo's entries in the frames the pickler writes (each MEMOIZE opcode; a data byte of the same value
counts too: from above) and the copy stops, with its reason, once the memo would pass a quarter of what the kernel
could allocate when it started (`memo_max`). These run CRANE's own sink and control with the interpreter's pickler
in this process: no kernel is needed to see the count and the stop.
"""

from __future__ import annotations

import pickle

import pytest

from crane.sandbox.kernel.pickling import _Sink
from crane.sandbox.kernel.stops import _MEMO_ENTRY, _Control, _Stopped


def _state(n: int) -> dict:
    shared = ["the same list"]
    return {"d": {i: str(i) for i in range(n)}, "blob": bytes(range(256)) * 2048,  # (written apart: data)
            "a": shared, "b": shared}


def test_the_memo_s_entries_are_counted_from_the_frames(tmp_path):
    ctl = _Control(str(tmp_path), 60.0, 0)
    pickler = pickle.Pickler(_Sink(None, ctl), protocol=5)
    pickler.dump(_state(200_000))
    entries = len(pickler.memo.copy())
    assert entries <= ctl.memo <= entries * 1.05, (ctl.memo, entries)  # (from above, and close)
    assert ctl.stop is None


def test_the_copy_stops_past_the_memo_s_bound(tmp_path):
    ctl = _Control(str(tmp_path), 60.0, 0)
    assert ctl.memo_max > 1_000_000 or ctl.memo_room is not None and ctl.memo_room < 1_000_000 * _MEMO_ENTRY * 4
    ctl.memo_max = 50_000  # (as on a kernel with about 12 MiB left)
    with pytest.raises(_Stopped, match="more than 50,000 objects"):
        pickle.Pickler(_Sink(None, ctl), protocol=5).dump(_state(200_000))
    assert ctl.stop and "a quarter of the memory the kernel has left" in ctl.stop
    assert 50_000 < ctl.memo < 50_000 + 30_000  # (stopped at the frame that passed it: 64 KiB at most)


def test_identity_is_kept_below_the_bound(tmp_path):
    ctl = _Control(str(tmp_path), 60.0, 0)
    path = tmp_path / "state.pkl"
    sink = _Sink(str(path), ctl)
    pickle.Pickler(sink, protocol=5).dump(_state(1000))
    sink.close()
    back = pickle.loads(path.read_bytes())
    assert back["a"] is back["b"] and back["d"][999] == "999"
