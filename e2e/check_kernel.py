"""Check that a kernel's history is still exactly what prime_kernel.py left: nothing else ran in it.

    python check_kernel.py CONNECTION_FILE EXPECTED_EXECUTION_COUNT

The question goes as one private request (`silent=True, store_history=False`, the answer in
`user_expressions`), so asking does not change what it checks. Prints a JSON summary on stdout; exit status
0 when the execution count and `len(In) - 1` both equal EXPECTED_EXECUTION_COUNT, else 1.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from jupyter_client import BlockingKernelClient

EXPR = "(get_ipython().execution_count, len(get_ipython().user_ns['In']) - 1)"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    conn_file, expected = Path(argv[0]), int(argv[1])
    kc = BlockingKernelClient(connection_file=str(conn_file))
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=30)
        msg_id = kc.execute("", silent=True, store_history=False, user_expressions={"h": EXPR})
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
    finally:
        kc.stop_channels()
    result = reply["content"]["user_expressions"]["h"]
    if result.get("status") != "ok":
        print(json.dumps({"error": f"{result.get('ename')}: {result.get('evalue')}"}))
        return 1
    # execution_count is the number the *next* cell gets: one more than the cells that ran
    next_count, history = ast.literal_eval(result["data"]["text/plain"])
    ran = next_count - 1
    print(json.dumps({"execution_count": ran, "history_length": history, "expected": expected}))
    return 0 if ran == expected and history == expected else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
