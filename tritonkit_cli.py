"""tritonkit: PyTorch models to Triton Inference Server, checked against eager PyTorch and proven under load.

Subcommands mirror the project's folders: `export` (export/), `serve` (deploy/), `loadtest` and `bench`
(loadtest/), `demo` (the main job).
Run `tritonkit COMMAND --help` for each.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from deploy import cli as deploy_cli
    from deploy import demo
    from export import cli as export_cli
    from loadtest import cli as loadtest_cli

    parser = argparse.ArgumentParser(prog="tritonkit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    export_cli.register(subparsers)
    deploy_cli.register(subparsers)
    loadtest_cli.register(subparsers)
    demo.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
