#!/usr/bin/env python3
"""Build bench cases (the format of the shared bench README) from case specs (a copy of
../shared/bench/dl-lite/tools/build.py; the cuda-lite specs use no make_data.py: their data are
scikit-learn's bundled digits or seeded numpy arrays made in the notebook).

Each spec (cases/<id>.py) defines ID, LIBRARY, ROOT_CAUSE, CRASH_TYPE, ENAME, SOURCE, DIAGNOSIS, optional NOTES
and FIX, MAKE_DATA (the text of make_data.py) and CELLS, a list made with md(text), code(count, source) and
target(source). A source or a count may be a dict {"buggy": ..., "fixed": ...} where the variants differ.
Usage: python build.py OUT_DIR SPEC.py...   (writes OUT_DIR/<id>/ and runs its make_data.py there)
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

VARIANTS = ("buggy", "fixed")


def md(text):
    return {"kind": "md", "source": text}


def code(count, source):
    return {"kind": "code", "count": count, "source": source}


def target(source):
    return {"kind": "target", "count": None, "source": source}


def pick(value, variant):
    return value[variant] if isinstance(value, dict) else value


def notebook(cells, variant):
    nb = new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    target_pos = None
    for i, c in enumerate(cells, 1):
        src = pick(c["source"], variant).strip("\n")
        if c["kind"] == "md":
            cell = new_markdown_cell(src)
        else:
            cell = new_code_cell(src)
            cell.execution_count = pick(c["count"], variant)
            if c["kind"] == "target":
                target_pos = i
        cell.id = f"cell-{i}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb, target_pos


def build(spec_path, out_root):
    ns = {"md": md, "code": code, "target": target}
    exec(compile(Path(spec_path).read_text(), str(spec_path), "exec"), ns)
    case_dir = Path(out_root) / ns["ID"]
    case_dir.mkdir(parents=True, exist_ok=True)
    variants = {}
    for v in VARIANTS:
        nb, pos = notebook(ns["CELLS"], v)
        nbformat.write(nb, case_dir / f"{v}.ipynb")
        expect = {"crash": True, "ename": ns["ENAME"]} if v == "buggy" else {"crash": False}
        variants[v] = {"notebook": f"{v}.ipynb", "target_cell": pos, "expect": expect}
    case = {"id": ns["ID"], "library": ns["LIBRARY"], "root_cause": ns["ROOT_CAUSE"],
            "crash_type": ns["CRASH_TYPE"], "source": ns["SOURCE"], "diagnosis": " ".join(ns["DIAGNOSIS"].split()),
            "variants": variants}
    for key in ("FIX", "NOTES"):
        if ns.get(key):
            case[key.lower()] = " ".join(ns[key].split())
    case["fixed_looks_risky"] = str(ns.get("NOTES", "")).startswith("Risky-looking")
    (case_dir / "case.json").write_text(json.dumps(case, indent=2) + "\n")
    if ns.get("MAKE_DATA"):
        (case_dir / "make_data.py").write_text(ns["MAKE_DATA"].lstrip("\n"))
        subprocess.run([sys.executable, "make_data.py"], cwd=case_dir, check=True)
    return case_dir


if __name__ == "__main__":
    out = sys.argv[1]
    for spec in sys.argv[2:]:
        print(build(spec, out))
