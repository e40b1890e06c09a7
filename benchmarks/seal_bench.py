"""Issue 42 (review M1): the cost of the private-module seal's check, before/after by PYTHONPATH.

Usage: PYTHONPATH=<tree>/server python benchmarks/seal_bench.py <kernel python> [rounds]. Installs `_crane_transplant`
(the largest bundle) in a fresh kernel, then times, inside the kernel (`timeit`, best of `rounds` x 20), the daemon's
check of the module this process installed (`KernelModule.version_expression(seal)`: the no-name chain to `sys`,
the seal's identity and the snapshot compared object for object) and, for reference, the call of `VERSION`'s
`str.__len__`-free probe: the same expression without the seal (`version_expression()`). Prints JSON (ms a check)."""
import json
import sys
import tempfile
from pathlib import Path

import crane
from crane.kernel.manager import start_kernel
from crane.kernel.private_module import ModuleClient
from crane.sandbox.transplant import TRANSPLANT_MODULE

py = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
k = start_kernel(Path(tempfile.mkdtemp()), python=py)
try:
    c = k.connection
    client = ModuleClient(c, TRANSPLANT_MODULE)
    client.ensure_installed(timeout=60)
    seal = client.address
    out = {"tree": crane.__file__}
    for key, expr in (("sealed_check_ms", TRANSPLANT_MODULE.version_expression(seal)),
                      ("unsealed_ms", TRANSPLANT_MODULE.version_expression())):
        assert c.evaluate(expr) == TRANSPLANT_MODULE.version, key
        out[key] = c.evaluate(
            f"(lambda t, code: min(t.repeat(lambda: eval(code, {{}}), number=20, repeat={rounds})) / 20 * 1000)"
            f"(__import__('timeit'), compile({expr!r}, '<bench>', 'eval'))")
    print(json.dumps(out))
finally:
    k.shutdown()
