"""`python -m crane.lsp`: the language server on stdio, without going through the CLI's parser."""

from crane.commands.serve import add_arguments, run

if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="crane-lsp")
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
