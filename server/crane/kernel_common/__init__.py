"""Kernel-side parts shared by every private module that needs them (the probe's `_crane_probe`, the fork sandbox's
`_crane_sandbox`, the transplant export's `_crane_transplant`): run in the user's kernel, standard library only,
shipped as parts of those modules (never imported by the daemon)."""
