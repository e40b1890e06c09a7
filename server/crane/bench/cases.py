"""Bench cases: `<case>/case.json` plus its notebooks, decoded and validated at the edge."""

from __future__ import annotations

from pathlib import Path

import msgspec

from crane.errors import CraneError


class BenchError(CraneError):
    """A bench directory or case that does not follow the format."""


class Expect(msgspec.Struct):
    crash: bool
    ename: str | None = None


class Variant(msgspec.Struct):
    notebook: str
    target_cell: int
    expect: Expect
    history_errors: list[int] = []


class Case(msgspec.Struct):
    id: str
    variants: dict[str, Variant]
    library: str = "unknown"
    root_cause: str = "unknown"
    crash_type: str = "unknown"
    diagnosis: str = ""
    directory: str = ""  # filled when loaded


def load_case(directory: Path) -> Case:
    path = directory / "case.json"
    try:
        case = msgspec.json.decode(path.read_bytes(), type=Case)
    except OSError as exc:
        raise BenchError(f"cannot read {path}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BenchError(f"{path} is not a valid case.json: {exc}") from None
    case.directory = str(directory)
    return case


def find_cases(paths: list[str]) -> list[Case]:
    """Each path is a case directory (holding case.json) or a directory of them."""
    cases = []
    for raw in paths:
        p = Path(raw)
        if (p / "case.json").is_file():
            cases.append(load_case(p))
        elif p.is_dir():
            found = sorted(q.parent for q in p.glob("*/case.json"))
            if not found:
                raise BenchError(f"{p} holds no bench case (no */case.json)")
            cases.extend(load_case(q) for q in found)
        else:
            raise BenchError(f"{p} is not a directory")
    return cases
