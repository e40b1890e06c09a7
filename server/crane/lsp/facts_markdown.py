"""Runtime facts as short markdown, for hovers and diagnoses (never a full repr: the facts are bounded)."""

from __future__ import annotations

from typing import Any

from crane.probe.facts import ColumnFacts, Facts

MAX_COLUMNS = 12


def _short(v: Any, n: int = 60) -> str:
    s = v if isinstance(v, str) else repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def _code(s: Any) -> str:
    text = str(s).replace("`", "'")
    return f"`{text}`"


def facts_markdown(f: Facts, stale: bool = False, heading: bool = True) -> str:
    lines: list[str] = []
    if heading:
        lines.append(f"**{f.name}**: {_code(f.type)}" + ("  _(stale: read before the running cell)_" if stale else ""))
    bits = []
    if f.shape is not None:
        bits.append(f"shape {_code(tuple(f.shape))}")
    elif f.length is not None:
        bits.append(f"length {f.length}")
    if f.dtype:
        bits.append(f"dtype {_code(f.dtype)}")
    if f.device:
        bits.append(f"device {_code(f.device)}")
    if f.requires_grad is not None:
        bits.append(f"requires_grad={f.requires_grad}")
    if f.n_nan:
        bits.append(f"{f.n_nan} NaN")
    elif f.has_nan:
        bits.append("has NaN")
    if f.value_range:
        bits.append(f"range {_code(_short(f.value_range))}")
    if f.num_unique is not None:
        bits.append(f"{f.num_unique} unique")
    if f.defined_in is not None:
        bits.append(f"defined in `In[{f.defined_in}]`")
    if bits:
        lines.append("- " + ", ".join(bits))
    if f.value is not None:
        lines.append(f"- value {_code(_short(f.value, 120))}")
    if f.unique_values:
        lines.append(f"- values {_code(_short(f.unique_values, 120))}")
    elif f.example_values:
        lines.append(f"- e.g. {_code(_short(f.example_values, 120))}")
    if f.numeric_parse and f.numeric_parse != "all":
        ex = f" (e.g. {_code(f.non_numeric_example)})" if f.non_numeric_example else ""
        lines.append(f"- parses as numbers: {f.numeric_parse}{ex}")
    if f.columns:
        lines.append("")
        lines.append("| column | dtype | NaN | values |")
        lines.append("|---|---|---|---|")
        for c in f.columns[:MAX_COLUMNS]:
            lines.append(f"| {_cell(_code(c.name))} | {_cell(c.dtype)} | {_nan_cell(c)} | {column_values(c)} |")
        more = len(f.columns) - MAX_COLUMNS
        if more > 0 or f.columns_truncated:
            lines.append(f"\n…{max(more, 0)} more column(s)")
    if f.index is not None:
        lines.append(f"- index {f.index.type} ({f.index.dtype}), length {f.index.length}")
    if f.keys:
        lines.append(f"- keys {_code(_short(f.keys, 160))}")
    if f.element_types:
        lines.append(f"- element types {_code(_short(f.element_types, 120))}")
    if f.estimator is not None:
        e = f.estimator
        state = "fitted" if e.is_fitted else "**not fitted**"
        lines.append(f"- {e.class_name} ({state})")
        if e.n_features_in is not None:
            lines.append(f"- n_features_in_ = {e.n_features_in}")
        if e.feature_names_in:
            lines.append(f"- feature_names_in_ {_code(_short(e.feature_names_in, 160))}")
        if e.classes is not None:
            lines.append(f"- classes_ {_code(_short(e.classes, 120))}")
    if f.torch_module is not None:
        m = f.torch_module
        if m.first_layer:
            lines.append(f"- first layer {_code(m.first_layer)}")
        if m.expected_input_rank is not None:
            lines.append(
                f"- expects rank-{m.expected_input_rank} input"
                + (f" with {m.expected_in_features} features/channels" if m.expected_in_features is not None else "")
            )
        if m.n_parameters is not None:
            lines.append(f"- {m.n_parameters:,} parameters" + (f" on {m.device}" if m.device else ""))
    if f.keras_model is not None:
        k = f.keras_model
        lines.append(f"- input {k.input_shape}, output {k.output_shape}" + (f", loss {k.loss}" if k.loss else ""))
        if k.compiled is not None:
            lines.append("- compiled" + (f" (optimizer {k.optimizer}, metrics {_code(k.metrics or [])})"
                                         if k.compiled else ": **no**"))
        if k.layers:
            shown = ", ".join(
                la.type + "(" + ", ".join(str(x) for x in (la.units or la.filters, la.activation) if x is not None) + ")"
                for la in k.layers[:10])
            lines.append(f"- layers {_code(shown)}" + (" …" if k.layers_truncated or len(k.layers) > 10 else ""))
    if f.jit is not None:
        j = f.jit
        static = sorted(set(j.static_argnames) | {str(i) for i in j.static_argnums})
        lines.append(f"- jax.jit of {_code(j.function)}{_code('(' + ', '.join(j.params or []) + ')')}, static "
                     + (_code(static) if static else "none"))
    if f.kind == "tf_dataset":
        if f.batched is not None:
            lines.append("- batched" if f.batched else "- not batched")
        if f.element_spec:
            lines.append(f"- element_spec {_code(_short(f.element_spec, 200))}")
    if f.kind == "polars_lazy":
        lines.append("- LazyFrame: schema only (not collected)")
    if f.value_skipped:
        lines.append(f"- values not read ({f.value_skipped})")
    if f.committed is not None:
        lines.append(f"- committed to its device: {f.committed}")
    if f.dataloader is not None:
        d = f.dataloader
        lines.append(
            f"- batch size {d.batch_size}, {d.num_batches} batches"
            + (f", sample shapes {_code(d.sample_shapes)}" if d.sample_shapes else "")
        )
    if f.signature:
        params = ", ".join(p.name + ("=" + (p.default or "…") if p.has_default else "") for p in f.signature[:8])
        lines.append(f"- signature {_code('(' + params + ')')}")
    if f.module_name:
        lines.append(f"- module {_code(f.module_name)}")
    if f.truncated:
        lines.append("- _(facts truncated at the size cap)_")
    return "\n".join(lines)


MAX_SHOWN_VALUES = 3


def _num(v: Any) -> str:
    """A number as a reader wants it: ints as they are, floats to 4 significant digits."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return str(v) if isinstance(v, int) else f"{v:.4g}"


def _value(v: Any) -> str:
    """A column value as the probe sends it: JSON numbers and strings (quoted, escapes visible)."""
    return repr(v) if isinstance(v, str) else _num(v)


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell (a pipe would end the cell, even inside a code span)."""
    return text.replace("|", "\\|").replace("\n", " ")


def column_values(c: ColumnFacts) -> str:
    """What a DataFrame column holds, as the probe saw it: its kind, then every value when there are at most
    five, else the numeric or datetime range, else a few example values and how many distinct values; text
    columns say when their values are (or only some are) numbers written as text."""
    bits = []
    if c.unique_values is not None:
        bits.append(_code(", ".join(_value(v) for v in c.unique_values)))
    elif c.value_range and len(c.value_range) == 2:
        bits.append(_code(f"{_num(c.value_range[0])} … {_num(c.value_range[1])}"))
    elif c.example_values:
        shown = c.example_values[:MAX_SHOWN_VALUES]
        more = ", …" if c.num_unique is None or c.num_unique > len(shown) else ""
        bits.append("e.g. " + _code(", ".join(repr(v) for v in shown) + more))
    if c.num_unique is not None and c.unique_values is None:
        bits.append(f"{c.num_unique:,} unique")
    if c.numeric_parse == "all":
        bits.append("numbers as text")
    elif c.numeric_parse == "some":
        ex = f": {_code(c.non_numeric_example)}" if c.non_numeric_example else ""
        bits.append(f"not all numbers{ex}")
    text = ", ".join(bits) + (" (sample)" if c.sampled and bits else "")
    kind = c.kind or ""
    return _cell(f"{kind}: {text}" if kind and text else kind or text)


def _nan_cell(c) -> str:
    """The NaN count, or what a sample showed when the column was too long to count (then n_nan is not a count)."""
    if not c.sampled:
        return str(c.n_nan)
    return "some (sampled)" if c.has_nan else "none in sample" if c.has_nan is False else "?"
