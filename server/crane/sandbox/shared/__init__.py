"""Code that runs on both sides of the sandbox's process boundary, standard library only.

A file here is imported by the daemon as usual AND shipped as a part of the kernel-side module (listed in
`crane.sandbox.channel.SANDBOX_PARTS`), so it imports nothing but the standard library (tests/architecture).
"""
