"""Review L1 (round 11): the memo count reads only the pickler's own writes (kernel/pickling._Sink, _own_write).

The C pickler writes a value of 64 KiB or more apart from its frames: the write before ends with the value's opcode
and size, the next is the value's data itself (a `bytes` value is handed to `write` as it is). The sink counted the
MEMOIZE opcodes of every `bytes` write starting 0x80 (PROTO) or 0x95 (FRAME), so a notebook's bytes value starting
so (`b"\\x80" + b"\\x94" * n`) counted as n memo entries and stopped the copy. Now a write the pickler announced as a
value's data is never counted, whatever it starts with (a forged FRAME header included), and the frames around it
still are. These run CRANE's own sink and control with the interpreter's C pickler in this process.
"""

from __future__ import annotations

import pickle

from crane.sandbox.kernel.pickling import _Sink
from crane.sandbox.kernel.stops import _Control

MEMOIZE = 0x94
N = 200_000


def _values_like_frames() -> dict:
    """Large values whose data is MEMOIZE bytes behind a PROTO or a forged FRAME header, of each kind written apart."""
    forged = b"\x95" + N.to_bytes(8, "little") + bytes([MEMOIZE]) * N
    return {"proto": b"\x80" + bytes([MEMOIZE]) * N, "frame": forged, "again": forged,
            "text": chr(MEMOIZE) * N, "array": bytearray(b"\x80" + bytes([MEMOIZE]) * N)}


def test_a_value_written_apart_is_not_counted_as_memo_entries(tmp_path):
    ctl = _Control(str(tmp_path), 60.0, 0)
    ctl.memo_max = 50_000  # (before: the values' bytes counted past it, the copy stopped)
    pickler = pickle.Pickler(_Sink(None, ctl), protocol=5)
    pickler.dump(_values_like_frames())
    assert ctl.stop is None
    assert ctl.memo <= 100, ctl.memo  # the handful of the pickler's own


def test_frames_around_values_written_apart_are_counted(tmp_path):
    ctl = _Control(str(tmp_path), 60.0, 0)
    state = {"before": [str(i) for i in range(N)], **_values_like_frames(), "after": [str(-i) for i in range(N)]}
    pickler = pickle.Pickler(_Sink(None, ctl), protocol=5)
    pickler.dump(state)
    entries = len(pickler.memo.copy())
    assert entries <= ctl.memo <= entries * 1.05, (ctl.memo, entries)  # (from above, and close: both lists counted)
