"""Static analysis of notebook cells: IPython syntax to Python, names, keys, paths; the abstract evaluator."""
