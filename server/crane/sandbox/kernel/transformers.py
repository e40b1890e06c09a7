"""The notebook's cell transformers, kernel side (issue 42, h1): what the kernel's shell rewrites every cell with.

An earlier cell can register transformers that every later cell goes through in the kernel: string transformers
(`input_transformers_cleanup` before IPython's own, `input_transformers_post` after them, or the transformer
manager's `line_transforms`/`token_transformers`) and AST transformers (`ast_transformers`). The copy's worker runs
`transform_cell` and `transform_ast` on a shell of its own: without the notebook's transformers it ran the cell as
written (a name a transformer defines or rewrites away gave a certain NameError where the kernel runs clean).

`shell_transformers` reads the five lists from the shell's trait values and instance dicts (exact lists only, from
dicts proven to hold exact `str` keys only, kernel/waiting.str_get: else missed; nothing is called) and says, entry by entry, what the worker's shell is to hold: IPython's own transforms by name
(the worker's IPython has them: `["ipython", name]`), the notebook's (and a library's) as objects the export copies
like any other value, by value for the notebook's (`["copy", obj]`: they run in the worker only, under its
confinement). CRANE's own test watcher (crane.kernel.untouched: its private module `_crane_untouched`) is left
out. What cannot be copied (the proof refuses it, its module is not one a worker can import) makes the lists not
carried at all, and is named in `missed` (env.json `shell_missed`: a crash in the copy is then only "likely",
transplant.crash_certain). Nothing of the notebook's runs here.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.kernel.bound import (  # kernel: strip
    _T_MODULE,
    _FunctionType,
    _mdict,
    _module,
)
from crane.sandbox.kernel.proof import _is_class, _library_function, _Proof, _Refused  # kernel: strip
from crane.sandbox.kernel.stops import _unreproducible  # kernel: strip
from crane.sandbox.kernel.waiting import OddKeyError, own_dict, str_get  # kernel: strip

TRANSFORMERS_KEY = "\x00crane-transformers"
_IPYTHON_TRANSFORMS = "IPython.core.inputtransformer2"
_CRANE_WATCHERS = ("_crane_untouched",)  # CRANE's own tests' effect sentinels (crane.kernel.untouched)
# the lists, by the name the worker sets them under (worker/main._set_transformers), and what a miss is called
_TRANSFORMER_LISTS = (("post", "input_transformers"), ("cleanup", "input_transformers"), ("line", "input_transformers"),
                      ("token", "input_transformers"), ("ast", "ast_transformers"))
_UNKNOWN = object()  # a list not read: its dict holds a key that is not an exact str (missed)


def shell_transformers(shell: Any, proof: _Proof) -> tuple[dict | None, list]:
    """({list: [entry]} to carry, or None when nothing of the notebook's is there or something is missed; the
    names of what is missed)."""
    try:  # (every dict read here proven to hold exact `str` keys first: a planted key's `__eq__` never runs)
        values = str_get(own_dict(shell), "_trait_values")
        if type(values) is not dict:
            return None, []
        lists = {"post": str_get(values, "input_transformers_post"), "ast": str_get(values, "ast_transformers")}
        manager = str_get(values, "input_transformer_manager")
    except OddKeyError:  # (the shell's lists unknown: a crash in the copy is only "likely")
        return None, ["input_transformers", "ast_transformers"]
    try:
        md = own_dict(manager) if manager is not None else {}
        lists.update(cleanup=str_get(md, "cleanup_transforms"), line=str_get(md, "line_transforms"),
                     token=str_get(md, "token_transformers"))
    except OddKeyError:
        lists.update(cleanup=_UNKNOWN, line=_UNKNOWN, token=_UNKNOWN)
    ipython = _mdict(_module(_IPYTHON_TRANSFORMS))
    carry: dict = {}
    missed: list = []
    notebooks = False
    for key, what in _TRANSFORMER_LISTS:
        items = lists[key]
        if items is None:  # (never read: IPython's default)
            continue
        if type(items) is not list:  # (a list subclass the notebook put there: its iteration is its code; unknown)
            if what not in missed:
                missed.append(what)
            continue
        entries: list = []
        for x in list(list.__iter__(items)):
            name = _ipython_own(x, ipython, proof)
            if name is not None:
                entries.append(["ipython", name])
            elif _crane_watcher(x):
                continue
            elif _copyable(x, proof):
                entries.append(["copy", x])
                notebooks = True
            elif what not in missed:
                missed.append(what)
        carry[key] = entries
    if missed or not notebooks:
        return None, missed
    return carry, missed


def _ipython_own(x: Any, ipython: dict, proof: _Proof) -> str | None:
    """The name of IPython's own transform `x` in IPython.core.inputtransformer2 (the function, the prompt
    stripper instance, the token transformer class the module holds), else None."""
    t = type(x)
    if t is _FunctionType:
        if not _library_function(x):
            return None
    elif _is_class(x):
        if not proof.library_class(x):
            return None
    elif not (_is_class(t) and proof.library_class(t) and proof.pristine(t)):
        return None
    for k, v in dict.items(ipython):
        if v is x and type(k) is str:
            return k
    return None


def _crane_watcher(x: Any) -> bool:
    """`x` is the input transformer of CRANE's own tests' watcher: a function of its private module (named so, and
    held by that module's namespace), read as C members of the exact function type."""
    if type(x) is not _FunctionType:
        return False
    mod = x.__module__
    return type(mod) is str and mod in _CRANE_WATCHERS and any(v is x for v in dict.values(_mdict(_module(mod))))


def _copyable(x: Any, proof: _Proof) -> bool:
    """`x` can be copied to the worker without running the notebook's code here, and made again there: proven,
    reproducible, and of the notebook's (`__main__`, copied by value) or of a module the worker can import (one with
    a file)."""
    try:
        proof.check(x)
    except _Refused:
        return False
    if _unreproducible(x):
        return False
    t = type(x)
    if t is _FunctionType:
        mod = x.__module__
    else:
        try:
            mod = _T_MODULE.__get__(x if _is_class(x) else t, type)
        except Exception:
            return False
    if type(mod) is not str:
        return False
    return mod == "__main__" or type(_mdict(_module(mod)).get("__file__")) is str


def transformers_missed(carry: dict) -> list:
    """What is missed when `carry` (`shell_transformers`' lists) cannot be copied after all (it did not pickle)."""
    out: list = []
    for key, what in _TRANSFORMER_LISTS:
        if any(e[0] == "copy" for e in carry.get(key) or ()) and what not in out:
            out.append(what)
    return out
