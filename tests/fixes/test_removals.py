"""What an edit removes is said, never silent (crane.agent.removals), and the repair agent's first prompt carries
the data-flow diagnosis and the multi-cell candidates (crane.agent.context). Pure: no kernel."""

from __future__ import annotations

from crane.agent.context import FixContext, context_message
from crane.agent.proposal import CellEdit, Proposal
from crane.agent.removals import removal_note, removed_parts
from crane.fixes.model import CellChange, VerifiedFix
from crane.notebook.model import Cell, Notebook


def test_removed_arguments_and_statements():
    assert removal_note("sns.boxplot(y=col, data=df, ax=ax[index])\n", "sns.boxplot(y=col, data=df)\n") == \
        "drops `ax=ax[index]`"
    assert removed_parts("plt.scatter(a, b, c)\n", "plt.scatter(a, b)\n") == ["c"]
    assert removed_parts("y = scale(y)\nfit(X, y)\n", "fit(X, y)\n") == ["y = scale(y)"]


def test_rewrites_are_not_removals():
    assert removal_note("df = df[df['m'] == '8']\n", "df = df[df['m'] == 8]\n") == ""
    assert removal_note("pd.get_dummies(df, columns=['a'])\n", "pd.get_dummies(df, columns=['a', 'b'])\n") == ""
    assert removal_note("x = f(a.values)\n", "x = f(a)\n") == ""


def test_a_proposal_that_drops_an_argument_says_so():
    p = Proposal(run_id="r", notebook=None, target=3, status="fixed", fixed=True, stop_reason="finished",
                 edits=[CellEdit(cell=3, old="sns.boxplot(y=c, ax=ax[i])\n", new="sns.boxplot(y=c)\n")])
    assert p.summary() == "fixed: 1 cell edit(s), 0 new cell(s) — cell 3 drops `ax=ax[i]`"


def test_agent_prompt_has_the_data_flow_and_other_cells_edits():
    cells = [Cell(number=1, cell_type="code", source="import pandas as pd\ndf = pd.read_csv('a.csv')\n",
                  execution_count=1),
             Cell(number=2, cell_type="code", source="X = df.values\n", execution_count=2),
             Cell(number=3, cell_type="code", source="X.describe()\n", execution_count=None)]
    nb = Notebook(path=None, cells=cells)
    fix = VerifiedFix(kind="array-source", title="Cell 2: keep the DataFrames (`df` for `df.values`); run cell 2 again",
                      target=3, old="X.describe()\n", new="X.describe()\n", run_first=(2,),
                      cell_edits=(CellChange(cell=2, old="X = df.values\n", new="X = df\n"),),
                      detail="`X` is a NumPy array: cell 2 built it from `df.values`")
    text = context_message(nb, FixContext(target=3, error="AttributeError: 'numpy.ndarray' object has no attribute "
                                          "'describe'", failing_line=1, candidates=[fix]))
    assert "## Where the failing line's values come from" in text
    assert "- `X` made in cell 2 [2]: `X = df.values`" in text
    assert "new source of cell 2:\n```python\nX = df\n```" in text and "why: `X` is a NumPy array" in text
