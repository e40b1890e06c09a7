"""No CRANE class that subclasses a standard-library class uses a private name of it, on any supported Python.

A subclass shares its base's attribute namespace: a private method or attribute of ours with the name of one of
the base's (`_handle` on a `threading.Thread` subclass, which Python 3.13's Thread sets on every thread) hides it
or is hidden by it, and reading one of the base's privates depends on what the next Python may rename. So for every
class in `crane` (every module imported) with a standard-library class in its MRO, the private names it defines
or uses on `self` (its `__dict__`, `__slots__`, and every `self._x` in its source) must be none of that base's
private names: on the running interpreter and on every other supported interpreter this machine has (3.10 to
3.14, free-threaded builds included; tests/kernel_envs.py finds them), plus the ones listed below for versions a
machine may lack.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import crane
from tests.architecture.stdlib_private_names import is_private, private_names
from tests.kernel_envs import supported_interpreters

HELPER = Path(__file__).with_name("stdlib_private_names.py")

# Private names of standard-library classes on versions a machine may not have (recorded on 3.12.1 and 3.13.0):
# Thread's new per-thread handle and its helpers.
KNOWN_ELSEWHERE: dict[str, set[str]] = {
    "threading:Thread": {"_handle", "_os_thread_handle", "_set_os_name", "_set_native_id", "_set_ident",
                         "_started", "_tstate_lock", "_is_stopped", "_wait_for_tstate_lock", "_stop",
                         "_delete", "_bootstrap", "_bootstrap_inner", "_reset_internal_locks", "_invoke_excepthook"},
}


def _is_stdlib_module(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names or module == "builtins"


class CraneClass:
    """A class of CRANE's, read from its source (kernel-side files are programs sent as text: never imported)."""

    def __init__(self, module: str, node: ast.ClassDef, imports: dict[str, str]):
        self.spec = f"{module}:{node.name}"
        self.node = node
        self.module = module
        self.imports = imports  # local name -> "module" or "module:attr"


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    out = {}
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                out[alias.asname or alias.name] = f"{base}:{alias.name}"
    return out


def _crane_classes() -> dict[str, CraneClass]:
    """Every class defined in a file under server/crane (nested ones too), by `module:Name`."""
    root = Path(crane.__file__).resolve().parent
    classes: dict[str, CraneClass] = {}
    for path in root.rglob("*.py"):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = _imports(tree, module)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                cls = CraneClass(module, node, imports)
                classes.setdefault(cls.spec, cls)
    return classes


def _resolve(expr: ast.expr, cls: CraneClass, classes: dict[str, CraneClass]) -> CraneClass | type | None:
    """A base-class expression: a CRANE class, a standard-library class, or None (a third-party one)."""
    if isinstance(expr, ast.Subscript):  # Generic[T], dict[str, int]
        return _resolve(expr.value, cls, classes)
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    head = expr.id
    if f"{cls.module}:{head}" in classes and not parts:
        return classes[f"{cls.module}:{head}"]
    target = cls.imports.get(head)
    if target is None:
        module, attrs = "builtins", [head, *parts]
    elif ":" in target:
        module, name = target.split(":")
        attrs = [name, *parts]
    else:
        module, attrs = target, parts
    while attrs and f"{module}.{attrs[0]}" not in classes and importlib.util.find_spec(module) is not None and (
        module.startswith("crane") and f"{module}:{attrs[0]}" not in classes
    ):
        module, attrs = f"{module}.{attrs[0]}", attrs[1:]
    if module.startswith("crane"):
        return classes.get(f"{module}:{'.'.join(attrs)}")
    if not _is_stdlib_module(module) or module in ("typing", "typing_extensions", "abc"):
        return None  # typing's Protocol/Generic/NamedTuple and ABC are not bases with private state
    try:
        obj: object = importlib.import_module(module)
        for attr in attrs:
            obj = getattr(obj, attr)
    except (ImportError, AttributeError):
        return None
    return obj if isinstance(obj, type) and obj is not object else None


def _stdlib_bases(cls: CraneClass, classes: dict[str, CraneClass], seen: frozenset[str] = frozenset()) -> set[type]:
    """The standard-library classes in the MRO of a CRANE class (through CRANE classes between)."""
    found: set[type] = set()
    for expr in cls.node.bases:
        base = _resolve(expr, cls, classes)
        if isinstance(base, CraneClass) and base.spec not in seen:
            found |= _stdlib_bases(base, classes, seen | {cls.spec})
        elif isinstance(base, type):
            found |= {klass for klass in base.__mro__ if klass is not object}
    return found


def private_uses(node: ast.ClassDef) -> set[str]:
    """The private names a class defines in its body (methods, attributes, `__slots__`) or touches on `self`."""
    names: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets) and stmt.value is not None:
                names |= {c.value for c in ast.walk(stmt.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    names |= {n.attr for n in ast.walk(node)
              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return {name for name in names if is_private(name)}


def _spec(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _private_names_everywhere(bases: set[type]) -> dict[str, set[str]]:
    """Each base's private names here, on every other supported interpreter found, and KNOWN_ELSEWHERE's."""
    names = {_spec(base): private_names(base) | KNOWN_ELSEWHERE.get(_spec(base), set()) for base in bases}
    for exe in supported_interpreters():
        if Path(exe).resolve() == Path(sys.executable).resolve():
            continue
        out = subprocess.run([exe, "-I", str(HELPER), *sorted(names)], capture_output=True, text=True, timeout=120,
                             check=True).stdout
        for spec, found in json.loads(out).items():
            names[spec] |= set(found or ())
    return names


def clashes(classes: dict[str, CraneClass], only: list[str] | None = None) -> list[str]:
    """`module:Class uses _x, a private name of module:Base` for every clash (among `only`, or all)."""
    stdlib_bases = {spec: _stdlib_bases(classes[spec], classes) for spec in (only or classes)}
    base_names = _private_names_everywhere({base for bases in stdlib_bases.values() for base in bases})
    found = []
    for spec, bases in stdlib_bases.items():
        uses = private_uses(classes[spec].node)
        for base in sorted(bases, key=_spec):
            for name in sorted(uses & base_names[_spec(base)]):
                found.append(f"{spec} uses {name}, a private name of {_spec(base)}")
    return found


def test_no_crane_class_uses_a_private_name_of_its_stdlib_base():
    classes = _crane_classes()
    assert len(classes) > 100  # every file was read
    subclasses = [spec for spec in classes if _stdlib_bases(classes[spec], classes)]
    assert "crane.lsp.crane_server:LspLogHandler" in subclasses  # logging.Handler: bases are resolved
    assert clashes(classes) == []


PLANTED = """
import threading
from threading import Thread as T
import collections as c


class ShadowsHandle(threading.Thread):  # what KernelWatch was: Python 3.13's Thread sets self._handle
    def _handle(self, msg):
        pass


class ReadsTarget(T):  # depends on a private attribute of Thread (through a renamed import)
    def run(self):
        return self._target


class Below(ShadowsHandle):  # a subclass of a subclass: still Thread's namespace
    _started = None


class OwnsAThread:  # the way out: a thread of its own, not a subclass
    def __init__(self):
        self._thread = threading.Thread(target=self._handle, daemon=True)

    def _handle(self):
        pass


class OwnPrivates(c.OrderedDict):  # private names of its own, none of OrderedDict's
    def _merge(self):
        self._seen = True
"""


def test_the_check_finds_a_shadowed_or_borrowed_private_name():
    tree = ast.parse(PLANTED)
    imports = _imports(tree, "crane.planted")
    classes = {f"crane.planted:{n.name}": CraneClass("crane.planted", n, imports)
               for n in tree.body if isinstance(n, ast.ClassDef)}
    found = clashes(classes)
    assert "crane.planted:ShadowsHandle uses _handle, a private name of threading:Thread" in found, found
    assert "crane.planted:ReadsTarget uses _target, a private name of threading:Thread" in found, found
    assert "crane.planted:Below uses _started, a private name of threading:Thread" in found, found
    assert not [f for f in found if "OwnsAThread" in f or "OwnPrivates" in f], found
@pytest.mark.parametrize("exe", supported_interpreters())
def test_thread_handle_is_seen_from_3_13(exe):
    """The helper really reads instance attributes: Thread._handle on 3.13+ (set in __init__, not in dir)."""
    out = json.loads(subprocess.run([exe, "-I", str(HELPER), "threading:Thread"], capture_output=True, text=True,
                                    timeout=120, check=True).stdout)
    version = tuple(int(part) for part in subprocess.run(
        [exe, "-I", "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True,
        check=True).stdout.split())
    assert "_target" in out["threading:Thread"]
    assert ("_handle" in out["threading:Thread"]) == (version >= (3, 13))
