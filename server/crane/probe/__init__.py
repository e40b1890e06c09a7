"""Runtime facts: the kernel-side probe and the daemon-side structs its output is decoded into."""
