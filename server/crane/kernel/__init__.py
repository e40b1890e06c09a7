"""Kernel access: starting kernels (manager.py), talking to them privately (client.py), replaying history."""
