"""A notebook that wraps `IPython.get_ipython` (extensions and tutorials do) with a function that records each call
and raises: what CRANE's kernel-side code must never call (it finds the shell from the class's own dict).
`WRAP` installs it (the calls in `CALLS`), `UNWRAP` puts IPython's back."""

WRAP = r"""
import IPython, IPython.core.getipython as _g
CALLS = []
_real_gi = IPython.get_ipython
def _wrapped():
    CALLS.append('IPython.get_ipython')
    raise RuntimeError('a notebook wrapper that fails')
IPython.get_ipython = _g.get_ipython = _wrapped
"""
UNWRAP = "IPython.get_ipython = _g.get_ipython = _real_gi"
