"""CRANE: crash prediction, diagnosis and repair for Jupyter notebooks from the live kernel state."""

__version__ = "0.1.0"
