"""Runtime facts (crane.probe.facts.ProbeResult) in a terse line-per-variable text for prompts.

Examples of the notation (one line per name; DataFrame columns on a second, indented line):
    df: DataFrame 891x12, NaN in 3 cols @In[2]
      cols: PassengerId:int64[1..891] Age:float64[0.42..80] NaN=177 Sex:object{female,male} Name:object(891 uniq, e.g. 'Braund, Mr. Owen','Heikkinen, Miss. L') ... +7: Cabin, ...
    y: Series int64 len=891 {0,1}
    clf: sklearn.linear_model.LogisticRegression unfitted; penalty='elasticnet' solver='liblinear'
    net: torch Net 769 params train cpu; expects rank-2 input, 10 features; fc1 Linear(10>64) act ReLU fc2 Linear(64>1)
`carried_kinds` names which of the facts the CRANE-LLM study's extractor lacked a prompt carries.
"""

from __future__ import annotations

from typing import Any

from crane.probe.facts import ColumnFacts, Facts, ProbeResult
from crane.text import short_type

MAX_DETAILED_COLUMNS = 10
MAX_COLUMN_EXAMPLES = 3
MAX_COLUMN_NAMES_CHARS = 240
MAX_VAR_CHARS = 600
FACTS_BUDGET_CHARS = 2200


def num(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    return s if len(s) <= 24 else s[:21] + "..."


def _range(r: list[Any] | None) -> str:
    return f"[{num(r[0])}..{num(r[1])}]" if r and len(r) == 2 else ""


def _uniques(vals: list[Any]) -> str:
    return "{" + ",".join(num(v) for v in vals) + "}"


def _example(v: str | None) -> str:
    """The probe sends reprs ("'abc'"); show them as they are, quoting bare text."""
    if v is None:
        return "?"
    return v if v[:1] in ("'", '"') else repr(v)


def column_text(c: ColumnFacts) -> str:
    s = f"{c.name}:{c.dtype}"
    if c.unique_values is not None and len(c.unique_values) <= 5:
        s += _uniques(c.unique_values)
    elif c.value_range:
        s += _range(c.value_range)
    elif c.num_unique is not None or c.example_values:
        parts = [f"{c.num_unique} uniq"] if c.num_unique is not None else []
        if c.example_values:  # a few values, as the probe carries them (short texts)
            parts.append("e.g. " + ",".join(repr(v) for v in c.example_values[:MAX_COLUMN_EXAMPLES]))
        s += "(" + ", ".join(parts) + ")"
    if c.n_nan:
        s += f" NaN={c.n_nan}"
    if c.numeric_parse in ("all", "some"):
        s += " numeric-text" if c.numeric_parse == "all" else f" mixed-text(not numeric: {_example(c.non_numeric_example)})"
    return s


def _pick_columns(cols: list[ColumnFacts], wanted: set[str]) -> set[int]:
    """Columns to detail: the ones the target names, with NaN, text that parses as numbers, then the first."""
    order = sorted(
        range(len(cols)),
        key=lambda i: (cols[i].name not in wanted, not cols[i].n_nan, cols[i].numeric_parse not in ("all", "some"), i),
    )
    return set(order[:MAX_DETAILED_COLUMNS])


def columns_text(f: Facts, wanted: set[str]) -> str:
    cols = f.columns or []
    picked = _pick_columns(cols, wanted)
    parts = [column_text(c) for i, c in enumerate(cols) if i in picked]
    rest = [c.name for i, c in enumerate(cols) if i not in picked]
    text = "  cols: " + " ".join(parts)
    if rest:
        names = ", ".join(rest)
        if len(names) > MAX_COLUMN_NAMES_CHARS:
            names = names[:MAX_COLUMN_NAMES_CHARS].rsplit(", ", 1)[0] + ", ..."
        text += f" +{len(rest)}: {names}"
    if f.columns_truncated:
        text += " (more columns not probed)"
    return text


MAX_SIGNATURE_CHARS = 180


def _signature(params, limit: int = MAX_SIGNATURE_CHARS) -> str:
    """(a, b=1, *args); parameter names only when the defaults make it long; bounded."""
    stars = [{"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(p.kind, "") for p in params or []]
    full = [f"{s}{p.name}" + (f"={p.default}" if p.has_default and p.default is not None else "")
            for s, p in zip(stars, params or [], strict=False)]
    text = "(" + ", ".join(full) + ")"
    if len(text) > limit:
        text = "(" + ", ".join(f"{s}{p.name}" for s, p in zip(stars, params, strict=False)) + ")"
    if len(text) > limit:
        text = text[: limit - 4].rsplit(", ", 1)[0] + ", ...)"
    return text


def _layer(layer) -> str:
    dims = ""
    if layer.in_features is not None:
        dims = f"({layer.in_features}>{layer.out_features})"
    elif layer.in_channels is not None:
        k = "x".join(map(str, layer.kernel_size or []))
        dims = f"({layer.in_channels}>{layer.out_channels}{', k' + k if k else ''})"
    elif layer.num_embeddings is not None:
        dims = f"({layer.num_embeddings}>{layer.embedding_dim})"
    return f"{layer.name} {layer.type}{dims}"


def var_text(name: str, f: Facts, wanted_cols: set[str], defined_at: int | None = None) -> str:
    t = short_type(f.type)
    bits: list[str] = []
    k = f.kind
    if k in ("polars_frame", "polars_lazy"):
        what = "polars LazyFrame (not collected)" if k == "polars_lazy" else "polars DataFrame"
        shape = "x".join(map(str, f.shape or []))
        bits.append(f"{name}: {what} {shape}".rstrip())
        nulls = sum(1 for c in (f.columns or []) if c.n_nan)
        if nulls:
            bits.append(f"nulls in {nulls} cols")
    elif k == "dataframe":
        shape = "x".join(map(str, f.shape or []))
        nan_cols = sum(1 for c in (f.columns or []) if c.n_nan)
        head = f"{name}: DataFrame {shape}"
        head += f", NaN in {nan_cols} cols" if nan_cols else (", no NaN" if f.has_nan is False else "")
        bits.append(head)
    elif k in ("series", "ndarray", "tensor", "polars_series"):
        head = f"{name}: {t} {f.dtype or ''}".rstrip()
        if f.shape is not None:
            head += " (" + ",".join(map(str, f.shape)) + ("," if len(f.shape) == 1 else "") + ")"
        elif f.length is not None:
            head += f" len={f.length}"
        bits.append(head)
        if f.unique_values is not None and len(f.unique_values) <= 5:
            bits.append(_uniques(f.unique_values))
        elif f.value_range:
            bits.append(_range(f.value_range))
        if f.n_nan:
            bits.append(f"NaN={f.n_nan}")
        elif f.has_nan:
            bits.append("has NaN")
        if f.numeric_parse == "some":
            bits.append(f"mixed-text(not numeric: {_example(f.non_numeric_example)})")
        if f.device and f.device != "cpu":
            bits.append(f"device={f.device}")
        if f.requires_grad:
            bits.append("requires_grad")
        if f.value_skipped:
            bits.append(f"(values not read: {f.value_skipped})")
    elif f.estimator is not None:
        e = f.estimator
        head = f"{name}: {e.module}.{e.class_name} " + ("fitted" if e.is_fitted else "unfitted")
        if e.n_features_in is not None:
            head += f" n_features_in={e.n_features_in}"
        bits.append(head)
        if e.classes is not None:
            bits.append("classes=" + _uniques(e.classes[:8]) + ("..." if len(e.classes) > 8 else ""))
        if e.feature_names_in:
            bits.append("features=" + ",".join(e.feature_names_in[:8]) + ("..." if len(e.feature_names_in) > 8 else ""))
        if e.params:
            bits.append("; " + " ".join(f"{p}={v}" for p, v in e.params.items()))
    elif f.torch_module is not None:
        m = f.torch_module
        head = f"{name}: torch {t}"
        if m.n_parameters is not None:
            head += f" {m.n_parameters} params"
        if m.training is not None:
            head += " train" if m.training else " eval"
        if m.device:
            head += f" {m.device}"
        bits.append(head + ";")
        if m.expected_input_rank is not None or m.expected_in_features is not None:
            exp = "expects"
            if m.expected_input_rank is not None:
                exp += f" rank-{m.expected_input_rank} input"
            if m.expected_in_features is not None:
                exp += f", {m.expected_in_features} features/channels"
            bits.append(exp + ";")
        bits.append(" ".join(_layer(lay) for lay in m.layers[:12]) + (" ..." if m.truncated or len(m.layers) > 12 else ""))
    elif f.keras_model is not None:
        km = f.keras_model
        bits.append(f"{name}: keras {t}")
        for label, v in (("input", km.input_shape), ("output", km.output_shape), ("layers", km.n_layers),
                         ("loss", km.loss), ("built", km.built)):
            if v is not None:
                bits.append(f"{label}={v}")
        extra: tuple[tuple[str, object], ...] = (
            ("compiled", km.compiled), ("optimizer", km.optimizer), ("losses", km.losses), ("metrics", km.metrics),
            ("inputs", km.inputs), ("outputs", km.outputs))  # fmt: skip
        for name_, val in extra:
            if val is not None:
                bits.append(f"{name_}={val}")
        if km.layers:
            bits.append("layers: " + " ".join(
                la.type + "(" + ",".join(str(x) for x in (la.units or la.filters, la.activation) if x is not None) + ")"
                for la in km.layers[:12]) + (" ..." if km.layers_truncated or len(km.layers) > 12 else ""))
    elif f.jit is not None:
        j = f.jit
        bits.append(f"{name}: jax.jit({j.function}) params=({', '.join(j.params or [])}) "
                    f"static={sorted(set(j.static_argnames) | {str(i) for i in j.static_argnums}) or 'none'}")
    elif k == "tf_dataset":
        bits.append(f"{name}: tf.data {t}" + (" batched" if f.batched else " unbatched" if f.batched is False else ""))
        if f.element_spec:
            bits.append(f"element_spec={f.element_spec}")
    elif k == "keras_history":
        bits.append(f"{name}: keras History epochs={f.length} keys={','.join(f.keys or [])}")
    elif f.dataloader is not None:
        d = f.dataloader
        bits.append(f"{name}: DataLoader")
        for label, v in (("batch", d.batch_size), ("batches", d.num_batches), ("examples", d.num_examples),
                         ("dataset", d.dataset_type)):
            if v is not None:
                bits.append(f"{label}={v}")
        if d.sample_shapes:
            bits.append("sample shapes=" + " ".join(d.sample_shapes))
        if d.sample_dtypes:
            bits.append("dtypes=" + " ".join(d.sample_dtypes))
    elif k == "module":
        bits.append(f"{name}: module {f.module_name or ''}".rstrip())
    elif k in ("function", "class") or f.signature is not None:
        label = k if k in ("function", "class") else t
        bits.append(f"{name}: {label}{_signature(f.signature) if f.signature is not None else ''}")
    else:
        head = f"{name}: {t}"
        if f.length is not None:
            head += f" len={f.length}"
        if f.shape is not None:
            head += " shape=(" + ",".join(map(str, f.shape)) + ")"
        bits.append(head)
        if f.value is not None:
            bits.append(f"= {f.value}")
        elif f.keys is not None:
            bits.append("keys=" + ",".join(f.keys[:10]) + ("..." if len(f.keys) > 10 else ""))
        elif f.element_types:
            bits.append("of " + ",".join(dict.fromkeys(f.element_types)))
    if f.index is not None and not (f.index.type == "RangeIndex" and f.index.start in (0, None)
                                    and f.index.step in (1, None)):
        ix = f.index
        lo = ix.min if ix.min is not None else ix.start
        hi = ix.max if ix.max is not None else ix.stop
        bits.append(f"index={ix.type}[{num(lo)}..{num(hi)}]" if lo is not None else f"index={ix.type}")
    where = f.defined_in if f.defined_in is not None else defined_at
    if where is not None and k != "module":
        bits.append(f"@In[{where}]")
    line = " ".join(b for b in bits if b)
    if len(line) > MAX_VAR_CHARS:
        line = line[: MAX_VAR_CHARS - 3] + "..."
    if k in ("dataframe", "polars_frame", "polars_lazy") and f.columns:
        line += "\n" + columns_text(f, wanted_cols)
    return line


def facts_text(
    probe: ProbeResult, budget: int = FACTS_BUDGET_CHARS, defined_at: dict[str, int] | None = None
) -> tuple[str, set[str]]:
    """(text, carried kinds). Names the target keys into get their columns detailed first; `defined_at` maps
    names to the execution count of the history cell that last bound or changed them."""
    defined_at = defined_at or {}
    wanted: dict[str, set[str]] = {}
    for kc in probe.keys:
        wanted.setdefault(kc.expr.split(".")[0], set()).add(str(kc.key))
    carried: set[str] = set()
    lines: list[str] = []
    for name, f in probe.facts.items():
        lines.append(var_text(name, f, wanted.get(name, set()), defined_at.get(name)))
        if f.columns:
            carried.add("per-column NaN")  # NaN=k on every column that has any
        if f.torch_module is not None:
            carried.add("nn.Module summary")
        if f.keras_model is not None:
            carried.add("keras model summary")
        if f.estimator is not None and f.estimator.params:
            carried.add("estimator params")
        if f.signature is not None:
            carried.add("signatures")
    if probe.undefined:
        lines.append("UNDEFINED (not in the kernel): " + ", ".join(probe.undefined))
        carried.add("undefined names")
    attrs = []
    for a in probe.attrs:
        if a.present is False:
            attrs.append(f"{a.expr} MISSING on {short_type(a.owner_type or '?')}")
        elif a.signature is not None:
            attrs.append(f"{a.expr}{_signature(a.signature, 90)}")
    if attrs:
        lines.append("attrs: " + "; ".join(attrs))
        carried.add("attribute checks")
    keys = [k for k in probe.keys if k.present is not None]
    if keys:
        lines.append("keys: " + "; ".join(
            f"{k.expr}[{k.key!r}]{'' if k.axis == 'key' else ' (' + k.axis + ')'} "
            + ("present" if k.present else "MISSING") for k in keys))
        carried.add("key checks")
    if probe.modules:
        lines.append("modules: " + ", ".join(f"{m} {'ok' if ok else 'NOT INSTALLED'}" for m, ok in probe.modules.items()))
        carried.add("module checks")
    if probe.paths:
        where = f" (cwd {probe.cwd})" if probe.cwd and not all(probe.paths.values()) else ""
        lines.append("files: " + ", ".join(f"{p} {'exists' if ok else 'MISSING'}" for p, ok in probe.paths.items())
                     + where)
        carried.add("file checks")
    if probe.libraries:
        lines.append("versions: " + " ".join(f"{k}={v}" for k, v in probe.libraries.items()))
        carried.add("library versions")
    text = "\n".join(lines)
    if len(text) > budget:  # keep the checks (last lines) and cut the variable lines in the middle
        tail = "\n".join(ln for ln in lines if ln.startswith(("UNDEFINED", "attrs:", "keys:", "modules:", "files:",
                                                               "versions:")))
        head_budget = max(budget - len(tail) - 40, budget // 3)
        head = "\n".join(ln for ln in lines if ln not in tail.split("\n"))
        text = head[:head_budget].rsplit("\n", 1)[0] + "\n(more facts cut)\n" + tail
    return text, carried
