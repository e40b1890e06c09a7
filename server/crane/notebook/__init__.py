"""Notebook documents: loading `.ipynb` files and ordering their execution history."""
