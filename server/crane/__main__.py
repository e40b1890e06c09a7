"""`python -m crane` entry point."""

from crane.cli import main

raise SystemExit(main())
