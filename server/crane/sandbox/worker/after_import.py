"""Portable sandbox, worker side: a `sys.meta_path` finder that runs CRANE's code right after a module the cell
imports has executed, before anything imports names from it (pyarrow's writers vetted: arrow.py; joblib's fork
pool: pools.py). It finds the real spec through the other finders and wraps its loader's `exec_module`."""

from __future__ import annotations

import sys
import types
from typing import Any


class AfterImport:
    """Subclasses say which module they want (`wants`) and what to do once it has executed (`after`)."""

    busy = False  # (looking for the real spec: its own finders' calls come back here)

    def wants(self, name: str) -> bool:
        raise NotImplementedError

    def after(self, name: str, module: types.ModuleType) -> None:
        raise NotImplementedError

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if self.busy or not self.wants(name):
            return None
        self.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self.busy = False
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec
        after = self.after

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            after(name, module)
        try:
            loader.exec_module = exec_module  # type: ignore[union-attr]
        except (AttributeError, TypeError):
            pass
        return spec

    def invalidate_caches(self) -> None:
        pass
