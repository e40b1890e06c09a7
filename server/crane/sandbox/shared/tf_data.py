"""tf.data pipelines in the copy: named, never guessed. Read side only (the kernel: kernel/export.py's reducers,
part of `_crane_transplant`); standard library only (see the package).

A `tf.data.Dataset` is a graph of TensorFlow ops held by the runtime of the kernel's process (its source tensors,
a Python generator, files, a shuffle buffer's state, an iterator's position): nothing a pickle can carry, and
TensorFlow's own pickling fails deep inside its variant tensors. Rebuilding one in the worker from the cells that
made it is not done yet (a replay of notebook cells, with their side effects and their own reads, in the worker);
until then the run is `unavailable`, saying which name holds a pipeline and why, and the rules decide the cell.
"""

from __future__ import annotations

from typing import Any

from crane.sandbox.shared.keras_graph import library_subclasses  # kernel: strip

TF_DATA_REFUSAL = ("a tf.data pipeline: its ops and their state live in the kernel's TensorFlow runtime, which a "
                   "copy cannot carry (rebuilding it from the cells that made it is not done)")


def tf_data_reducers(lib: Any) -> dict:
    """{exact type: reducer} for tf.data's `DatasetV2` and its subclasses loaded now (shared/keras_graph's
    `library_subclasses`): the reducer refuses the copy with `TF_DATA_REFUSAL` (a TypeError, which the export names
    with the value's name and type); it reads nothing of the object."""
    base = lib.mod("tensorflow.python.data.ops.dataset_ops").get("DatasetV2")
    if base is None:
        return {}

    def refuse(obj: Any) -> Any:
        raise TypeError(TF_DATA_REFUSAL)

    return library_subclasses(base, "tensorflow.", refuse)
