"""Pure logic of the call-signature, numpy-shape and torch rules over hand-built facts (no kernel)."""

from __future__ import annotations

from crane.probe.facts import Facts, LayerFacts, ParamFacts, TorchModuleFacts
from crane.rulekit.lib_helpers import Verdict
from crane.rules.calls import bind
from crane.rules.numpy_shapes import broadcast, dot_verdict, index_verdict, reshape_verdict
from crane.rules.torch_rules import input_verdict, loss_verdict

SCATTER = [ParamFacts(name="x", kind="POSITIONAL_OR_KEYWORD"), ParamFacts(name="y", kind="POSITIONAL_OR_KEYWORD"),
           ParamFacts(name="s", kind="POSITIONAL_OR_KEYWORD", has_default=True),
           ParamFacts(name="data", kind="KEYWORD_ONLY", has_default=True),
           ParamFacts(name="kwargs", kind="VAR_KEYWORD")]
PLAIN = [ParamFacts(name="a", kind="POSITIONAL_OR_KEYWORD"), ParamFacts(name="b", kind="POSITIONAL_OR_KEYWORD",
                                                                        has_default=True)]


def message(v: Verdict | None) -> str:
    """The message of a verdict that must be there."""
    assert v is not None
    return v.message


def test_multiple_values_is_reported_for_any_signature():
    v = bind("scatter", SCATTER, 3, ["s", "c"])
    assert v and v.message == "scatter() got multiple values for argument 's'"
    assert bind("scatter", SCATTER, 2, ["s", "c"]) is None


def test_other_binding_errors_only_for_exact_signatures():
    # a decorator may keep accepting an old keyword / positional use: not reported unless the signature is exact
    assert bind("f", PLAIN, 3, []) is None and bind("f", PLAIN, 1, ["old"]) is None
    assert message(bind("f", PLAIN, 3, [], exact=True)) == "f() takes from 1 to 2 positional arguments but 3 were given"
    assert message(bind("f", PLAIN, 1, ["c"], exact=True)) == "f() got an unexpected keyword argument 'c'"
    assert message(bind("f", PLAIN, 0, [], exact=True)) == "f() missing 1 required positional argument: 'a'"
    assert bind("f", PLAIN, 1, ["b"], exact=True) is None


def arr(shape, kind="ndarray"):
    return Facts(name="a", type="numpy.ndarray" if kind == "ndarray" else "torch.Tensor", kind=kind, shape=list(shape),
                 dtype="float64" if kind == "ndarray" else "torch.float32")


def test_shapes():
    assert broadcast((68,), (1,)) and broadcast((3, 1), (1, 4)) and not broadcast((68,), (272,))
    assert message(dot_verdict("x", arr((75, 4)), "w", arr((1, 4)), "dot")) == \
        "shapes (75,4) and (1,4) not aligned: 4 (dim 1) != 1 (dim 0)"
    assert dot_verdict("x", arr((75, 4)), "w", arr((4, 1)), "dot") is None
    assert reshape_verdict("a", arr((10,)), [-1, 2]) is None
    assert message(reshape_verdict("a", arr((10,)), [3, -1])) == "cannot reshape array of size 10 into shape (3,-1)"
    assert message(index_verdict("a", arr((5, 2)), (slice(None), 2))) == "index 2 is out of bounds for axis 1 with size 2"
    assert index_verdict("a", arr((5, 2)), -5) is None


def test_torch_first_layer_and_losses():
    seq = Facts(name="net", type="torch.nn.modules.container.Sequential", kind="torch_module",
                torch_module=TorchModuleFacts(layers=[LayerFacts(name="0", type="Linear", in_features=20,
                                                                 out_features=5)]))
    custom = Facts(name="net", type="__main__.Net", kind="torch_module", torch_module=seq.torch_module)
    x = arr((64, 10), "tensor")
    assert message(input_verdict("net", seq, "x", x)) == "mat1 and mat2 shapes cannot be multiplied (64x10 and 20x5)"
    assert input_verdict("net", custom, "x", x) is None  # forward order of a custom module is unknown
    assert input_verdict("net", seq, "x", arr((64, 20), "tensor")) is None
    target = Facts(name="y", type="torch.Tensor", kind="tensor", shape=[4], dtype="torch.float32")
    assert loss_verdict("CrossEntropyLoss", None, target, "y", "out") is None  # could be class probabilities
    assert loss_verdict("CrossEntropyLoss", arr((4, 3), "tensor"), target, "y", "out") is not None
    assert loss_verdict("NLLLoss", None, target, "y", "out") is not None


def test_nan_count_reads_sampled_columns_as_evidence_not_as_zero():
    from crane.probe.facts import ColumnFacts, Facts
    from crane.rulekit.lib_helpers import nan_count

    frame = "pandas.core.frame.DataFrame"

    def df(*cols: ColumnFacts, n_nan: int | None = None) -> Facts:
        return Facts(name="df", type=frame, kind="dataframe", columns=list(cols), n_nan=n_nan)

    exact = ColumnFacts(name="a", dtype="float64", n_nan=3)
    clean = ColumnFacts(name="b", dtype="float64", n_nan=0)
    seen = ColumnFacts(name="c", dtype="float64", sampled=True, has_nan=True)
    unseen = ColumnFacts(name="d", dtype="float64", sampled=True, has_nan=None)
    assert nan_count(df(exact, clean)) == 3
    assert nan_count(df(clean, seen)) == 1  # NaNs seen in a sample: at least one
    assert nan_count(df(clean, unseen)) is None  # none seen in a sample: unknown, not "no NaN"
    assert nan_count(df(clean, unseen, n_nan=0)) == 0  # unless the frame's exact total says so
    assert nan_count(df(clean)) == 0
