"""CLI subcommands: each module has `add_arguments(parser)` and `run(args) -> int`.

Exit codes: 0 no crash predicted / success, 1 a crash predicted (check) or a failure the command reports,
2 usage, input or kernel errors.
"""

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_ERROR = 2
