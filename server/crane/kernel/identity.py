"""Which kernel this is, read privately without looking up a name in the notebook's namespace.

The daemon identifies a kernel — the notebook file VS Code's Jupyter extension started it for
(`__vsc_ipynb_file__`), its pid (a restart behind an unchanged connection file), the count the next user cell
will get — at attach, in discovery (kernels CRANE has not installed anything in) and after every other client's
request. Those are `user_expressions` of a silent request, evaluated by IPython in the notebook's namespace: a name
in them (`globals`, `__import__`, `get_ipython`, `os`) is the notebook's when it bound one, and a notebook that
defines `get_ipython` or `globals` had its own function called by CRANE at each of those moments.

So the expressions read no name: the namespace is a fresh lambda's `__globals__` (a C getter: the request's own
globals), read with dict's own `get`; the pid comes from the interpreter's `sys` reached from literals by C
descriptors (kernel/private_module.SYS_EXPR) and its module table's `posix` (`nt` on Windows), whose `getpid` is
called only when it is a C function bound to that module under that name. The execution count is the one
ipykernel puts in every execute reply (the shell's, less one: a silent request does not advance it), read by the
kernel's own code, not by an expression. Each expression runs inside a trace call of the request's own
(`kernel/hooks_off.guarded`): no hook of the notebook's sees its frames. A value that is not an exact `str`/`int`
is None (a `str` subclass's `__repr__` is never formatted)."""

from __future__ import annotations

from crane.kernel.hooks_off import guarded
from crane.kernel.private_module import SYS_EXPR

# `__vsc_ipynb_file__` in the request's globals (the notebook's namespace), when it is an exact str
NOTEBOOK_PATH_EXPR = (
    "(lambda T, g: (lambda v: v if T(v) is ''.__class__ else None)({}.__class__.get(g, '__vsc_ipynb_file__')) "
    "if T(g) is {}.__class__ else None)(().__class__.__class__, (lambda: 0).__globals__)"
)
# the interpreter's `posix.getpid()` (`nt` on Windows), called only when it is the module's own C function
PID_EXPR = (
    "(lambda P: (lambda T, BF, D, S, SD, M, MT: (lambda m: (lambda f: f() if T(f) is BF "
    "and BF.__dict__['__name__'].__get__(f) == 'getpid' and BF.__dict__['__self__'].__get__(f) is m else None)"
    "(T.__dict__['__dict__'].__get__(MT)['__dict__'].__get__(m).get('getpid')) if T(m) is MT else None)"
    "(m if (m := {}.__class__.get(M, 'posix')) is not None else {}.__class__.get(M, 'nt')))(*P) "
    f"if P else None)({SYS_EXPR})"
)


def identity_expressions() -> dict[str, str]:
    """The `user_expressions` of an identifying request: `nb` (the notebook path or None), `pid` (int or None),
    each inside its own trace call (kernel/hooks_off)."""
    return {"nb": guarded(NOTEBOOK_PATH_EXPR, SYS_EXPR), "pid": guarded(PID_EXPR, SYS_EXPR)}
