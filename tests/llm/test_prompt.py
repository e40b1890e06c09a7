"""Prompt building from hand-built ProbeResults (the facts.py contract) and real notebook cells."""

from __future__ import annotations

from crane.finding import Finding
from crane.llm.facts_text import facts_text
from crane.llm.history import parse_cell, select, strip_comments
from crane.llm.prompt import SYSTEM_PROMPT, build_prompt
from crane.notebook.model import Cell
from crane.probe.facts import (
    AttrCheck,
    ColumnFacts,
    EstimatorFacts,
    Facts,
    KeyCheck,
    LayerFacts,
    ProbeResult,
    TorchModuleFacts,
)


def cell(n: int, src: str, count: int | None = None) -> Cell:
    return Cell(number=n, cell_type="code", source=src, execution_count=count)


HISTORY = [
    cell(1, "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt  # plots", 1),
    cell(2, "# load the data\ndf = pd.read_csv('data/train.csv')\ndf.head()", 2),
    cell(3, "plt.hist(df['Age'])\nplt.show()", 3),
    cell(4, "df['Fare'] = df['Fare'].fillna(0)\nunused = 42\nprint(df.shape)", 4),
    cell(6, "from sklearn.linear_model import LogisticRegression\nclf = LogisticRegression(solver='liblinear')", 5),
]
TARGET = cell(7, "# fit\nX = df[['Age', 'Fare']]\nclf.fit(X, df['Survived'])")

DF = Facts(
    name="df", type="pandas.core.frame.DataFrame", kind="dataframe", shape=[891, 4], has_nan=True, defined_in=4,
    columns=[
        ColumnFacts(name="PassengerId", dtype="int64", kind="continuous", num_unique=891, value_range=[1, 891]),
        ColumnFacts(name="Age", dtype="float64", n_nan=177, kind="continuous", value_range=[0.42, 80.0]),
        ColumnFacts(name="Fare", dtype="float64", kind="continuous", value_range=[0.0, 512.3292]),
        ColumnFacts(name="Survived", dtype="int64", kind="binary", unique_values=[0, 1]),
    ],
)
CLF = Facts(
    name="clf", type="sklearn.linear_model._logistic.LogisticRegression", kind="estimator",
    estimator=EstimatorFacts(class_name="LogisticRegression", module="sklearn.linear_model", is_fitted=False,
                             params={"penalty": "'l2'", "solver": "'liblinear'"}),
)
PROBE = ProbeResult(
    facts={"df": DF, "clf": CLF},
    keys=[KeyCheck(expr="df", key="Age", axis="columns", present=True),
          KeyCheck(expr="df", key="Survived", axis="columns", present=True)],
    libraries={"sklearn": "1.2.2", "pandas": "2.1.4"},
)
FINDING = Finding(rule="nan-input", ename="ValueError", message="ValueError: Input X contains NaN", line=3,
                  confidence=0.9, evidence=["df['Age'] has 177 NaN"])


def test_prompt_layout_and_stable_prefix():
    p = build_prompt(HISTORY, TARGET, PROBE, [FINDING])
    assert p.messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = p.messages[1]["content"]
    order = [user.index(h) for h in ("## Executed cells", "## Runtime state", "## Offline rules", "## Target cell")]
    assert order == sorted(order)
    assert user.startswith("## Executed cells")  # the history right after the system prompt (cache prefix)
    # deterministic: the same question gives byte-identical messages (provider and on-disk caches)
    assert build_prompt(HISTORY, TARGET, PROBE, [FINDING]).messages == p.messages
    assert p.chars == len(SYSTEM_PROMPT) + len(user) and p.user_chars == len(user)
    assert set(p.sections) == {"history", "facts", "findings", "target"}


def test_history_keeps_what_defines_the_target_names_and_strips_comments():
    user = build_prompt(HISTORY, TARGET, PROBE, []).messages[1]["content"]
    hist = user.split("## Runtime state")[0]
    assert "df = pd.read_csv('data/train.csv')" in hist
    assert "import pandas as pd" in hist  # pd is needed by the statement defining df
    assert "df['Fare'] = df['Fare'].fillna(0)" in hist  # mutates df
    assert "clf = LogisticRegression(solver='liblinear')" in hist
    assert "from sklearn.linear_model import LogisticRegression" in hist
    for dropped in ("plt.hist", "unused = 42", "df.head()", "import numpy", "print(df.shape)", "# load", "# plots"):
        assert dropped not in hist
    assert "# In[2] cell 2" in hist and "# In[5] cell 6" in hist  # execution counts and cell numbers
    assert "Also ran (nothing the target uses): In[3]" in hist
    assert "\n...\n" in hist or hist.rstrip().endswith("...")  # gaps are marked


def test_target_is_numbered_with_original_lines():
    user = build_prompt(HISTORY, TARGET, PROBE, []).messages[1]["content"]
    target = user.split("## Target cell\n")[1]
    assert target.splitlines() == ["1|", "2| X = df[['Age', 'Fare']]", "3| clf.fit(X, df['Survived'])"]


def test_compact_facts_carry_per_column_nan_and_checks():
    text, carried = facts_text(PROBE)
    lines = text.splitlines()
    assert lines[0] == "df: DataFrame 891x4, NaN in 1 cols @In[4]"
    assert lines[1].startswith("  cols: ") and "Age:float64[0.42..80] NaN=177" in lines[1]
    assert "Survived:int64{0,1}" in lines[1]
    assert lines[2].startswith("clf: sklearn.linear_model.LogisticRegression unfitted")
    assert "solver='liblinear'" in lines[2]
    assert "keys: df['Age'] (columns) present; df['Survived'] (columns) present" in text
    assert "versions: sklearn=1.2.2 pandas=2.1.4" in text
    assert "{" not in lines[0] and "'type':" not in text  # not a pprint of dicts
    assert {"per-column NaN", "key checks", "estimator params", "library versions"} <= carried


def test_undefined_names_modules_files_attrs_and_torch_modules():
    net = Facts(
        name="net", type="__main__.Net", kind="torch_module",
        torch_module=TorchModuleFacts(
            layers=[LayerFacts(name="fc1", type="Linear", in_features=10, out_features=64),
                    LayerFacts(name="act", type="ReLU"),
                    LayerFacts(name="fc2", type="Linear", in_features=64, out_features=1)],
            n_parameters=769, training=True, device="cpu", expected_input_rank=2, expected_in_features=10),
    )
    probe = ProbeResult(
        facts={"net": net},
        undefined=["X_train"],
        attrs=[AttrCheck(expr="net.predict", present=False, owner_type="__main__.Net")],
        modules={"xgboost": False, "torch": True},
        paths={"data/train.csv": False},
        cwd="/tmp/case",
    )
    text, carried = facts_text(probe)
    assert "net: torch Net 769 params train cpu; expects rank-2 input, 10 features/channels;" in text
    assert "fc1 Linear(10>64) act ReLU fc2 Linear(64>1)" in text
    assert "UNDEFINED (not in the kernel): X_train" in text
    assert "attrs: net.predict MISSING on Net" in text
    assert "modules: xgboost NOT INSTALLED, torch ok" in text
    assert "files: data/train.csv MISSING (cwd /tmp/case)" in text
    assert {"nn.Module summary", "undefined names", "module checks", "file checks", "attribute checks"} <= carried


def test_wide_frames_are_bounded_and_name_the_columns_the_target_uses():
    cols = [ColumnFacts(name=f"feature_{i}", dtype="float64", value_range=[0.0, 1.0]) for i in range(200)]
    cols[150] = ColumnFacts(name="feature_150", dtype="object", numeric_parse="some", non_numeric_example="12a")
    df = Facts(name="df", type="pandas.core.frame.DataFrame", kind="dataframe", shape=[10, 200], columns=cols)
    probe = ProbeResult(facts={"df": df}, keys=[KeyCheck(expr="df", key="feature_199", axis="columns", present=True)])
    text, _ = facts_text(probe)
    col_line = text.splitlines()[1]
    assert "feature_199:float64[0..1]" in col_line  # named by the target: detailed
    assert "feature_150:object mixed-text(not numeric: '12a')" in col_line  # a likely conversion error: detailed
    assert "+190:" in col_line and len(col_line) < 900


def test_facts_budget_keeps_the_checks():
    many = {f"v{i}": Facts(name=f"v{i}", type="builtins.str", kind="str", value="'" + "x" * 200 + "'")
            for i in range(40)}
    probe = ProbeResult(facts=many, undefined=["missing_name"], modules={"nope": False})
    text, _ = facts_text(probe, budget=1500)
    assert len(text) <= 1600
    assert "UNDEFINED (not in the kernel): missing_name" in text and "modules: nope NOT INSTALLED" in text
    assert "(more facts cut)" in text


def test_traceback_section_for_a_cell_that_already_failed():
    tb = ["\x1b[0;31mKeyError\x1b[0m                     Traceback", "KeyError: 'Age'"]
    p = build_prompt(HISTORY, TARGET, PROBE, [], traceback=tb)
    user = p.messages[1]["content"]
    assert user.rstrip().endswith("KeyError: 'Age'") and "\x1b" not in user
    assert "## It already failed with" in user and "traceback" in p.sections


def test_history_errors_are_kept():
    hist = [*HISTORY, cell(8, "df = df.drop(columns=['Nope'])\nmodel = 1", 6)]
    p = build_prompt(hist, cell(9, "print(len(df))"), None, [], history_errors={8: "KeyError: \"['Nope'] not found\""})
    user = p.messages[1]["content"]
    assert "# raised KeyError" in user and "(no kernel: static analysis only)" in user


def test_long_histories_are_trimmed_farthest_dependencies_first():
    chain = [cell(1, "import pandas as pd", 1)]
    for i in range(2, 60):
        chain.append(cell(i, f"d{i} = d{i - 1}.copy() if {i} > 2 else pd.DataFrame({{'a': list(range(100))}})\n"
                             f"x{i} = d{i}.describe()  # {'pad ' * 20}", i))
    p = build_prompt(chain, cell(60, "d59['a'].sum()"), None, [], history_budget=1000)
    hist = p.messages[1]["content"].split("## Runtime state")[0]
    assert "d59 = d58.copy()" in hist  # the direct definition survives
    assert "x10 =" not in hist  # unrelated statements never enter
    assert p.history_statements_cut > 0 and len(hist) < 1600


def test_comments_are_stripped_but_strings_kept():
    src = "s = '# not a comment'  # a comment\n# only comment\n\nx = 1"
    assert strip_comments(src) == "s = '# not a comment'\nx = 1"
    assert strip_comments(src, keep_lines=True).splitlines() == ["s = '# not a comment'", "", "", "x = 1"]


def test_magics_and_inplace_mutations():
    cells = [parse_cell(cell(1, "%matplotlib inline\nimport pandas as pd\ndf = pd.DataFrame()", 1)),
             parse_cell(cell(2, "df.dropna(inplace=True)\ndf.head()\nnp_arr = 3", 2)),
             parse_cell(cell(3, "!pip install xgboost\ntrain(model, df)", 3))]
    select(cells, {"df"})
    kept = [ln for hc in cells for st in hc.stmts if st.depth is not None for ln in st.lines]
    assert kept == ["import pandas as pd", "df = pd.DataFrame()", "df.dropna(inplace=True)", "train(model, df)"]


def test_cache_markers_for_anthropic_split_at_the_stable_prefix():
    from crane.llm.predictor import needs_cache_markers
    from crane.llm.prompt import with_cache_markers

    p = build_prompt(HISTORY, TARGET, PROBE, [])
    marked = with_cache_markers(p.messages, p.stable_chars)
    blocks = marked[1]["content"]
    assert blocks[0]["cache_control"] == {"type": "ephemeral"} and "cache_control" not in blocks[1]
    assert blocks[0]["text"].startswith("## Executed cells") and blocks[1]["text"].startswith("## Runtime state")
    assert blocks[0]["text"] + blocks[1]["text"] == p.messages[1]["content"]
    assert marked[0]["content"][0]["text"] == SYSTEM_PROMPT
    assert needs_cache_markers("anthropic/claude-sonnet-4-5") and needs_cache_markers("bedrock/anthropic.claude-3")
    assert not needs_cache_markers("openai/gpt-4o-mini")
