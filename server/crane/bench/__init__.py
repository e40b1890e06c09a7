"""Benchmarking CRANE on crash/fix notebook pairs (format: ../shared/bench/README.md)."""
