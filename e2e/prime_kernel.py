"""Run some cells of a notebook in a running kernel, as a user would have, so its state matches the notebook.

    python prime_kernel.py CONNECTION_FILE NOTEBOOK CELL [CELL ...]

CELL numbers are 1-based over all cells (markdown included), as CRANE numbers them. The cells run with
`store_history=True`, so they enter `In`/`Out` and raise the execution count like a real run. Waits up to
30 s for the connection file (the kernel writes it when it starts). Exit status 0 when every cell ran
without error, else 1 with the kernel's error on stderr.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from jupyter_client import BlockingKernelClient


def cell_sources(notebook: Path) -> list[tuple[str, str]]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    out = []
    for cell in nb["cells"]:
        src = cell.get("source", "")
        out.append((cell["cell_type"], "".join(src) if isinstance(src, list) else src))
    return out


def wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text(encoding="utf-8")).get("shell_port"):
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise SystemExit(f"prime_kernel: no connection file at {path} after {timeout:.0f} s")


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    conn_file, notebook, numbers = Path(argv[0]), Path(argv[1]), [int(n) for n in argv[2:]]
    cells = cell_sources(notebook)
    wait_for(conn_file, 30)
    kc = BlockingKernelClient(connection_file=str(conn_file))
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=30)
        for n in numbers:
            kind, source = cells[n - 1]
            if kind != "code":
                raise SystemExit(f"prime_kernel: cell {n} is a {kind} cell")
            reply = kc.execute_interactive(source, store_history=True, timeout=60, output_hook=lambda msg: None)
            content = reply["content"]
            if content["status"] != "ok":
                print(f"prime_kernel: cell {n} failed: {content.get('ename')}: {content.get('evalue')}", file=sys.stderr)
                return 1
            print(f"prime_kernel: ran cell {n} as In[{content['execution_count']}]", file=sys.stderr)
    finally:
        kc.stop_channels()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
