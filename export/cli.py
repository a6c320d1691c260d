"""``tritonkit export``: built-in models from export/models.toml into the Triton repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from export import catalog
from export.errors import ExportError
from export.spec import DynamicBatching, InstanceGroup

DEFAULT_REPOSITORY = Path(__file__).resolve().parent.parent / "model_repository"

EPILOG = """\
examples:
  tritonkit export                          every model in export/models.toml
  tritonkit export digits --force           re-export even when nothing changed
  tritonkit export digits --max-batch-size 128 --instances 4 --max-queue-delay-us 500

Each export is traced to TorchScript, reloaded from disk and compared with the eager model on real
data; the model's folder gets <version>/model.pt, config.pbtxt and manifest.json (the parity figures).
An export whose config, code and torch version have not changed is skipped.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export", help="export built-in models to TorchScript and write their config.pbtxt",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="*", help="models from export/models.toml (default: all)")
    parser.add_argument("--repository", type=Path, default=None,
                        help="Triton model repository (default: $MODEL_REPOSITORY or ./model_repository)")
    parser.add_argument("--catalog", type=Path, default=catalog.CATALOG, help="declarative model list")
    parser.add_argument("--force", action="store_true", help="export even when up to date")
    serving = parser.add_argument_group("serving settings (override the catalog for the named models)")
    serving.add_argument("--max-batch-size", type=int, help="largest batch; 0 disables batching")
    serving.add_argument("--max-queue-delay-us", type=int, help="dynamic batching: wait for a batch to fill")
    serving.add_argument("--preferred-batch-sizes", type=lambda s: tuple(int(x) for x in s.split(",")),
                         help="dynamic batching: comma-separated, e.g. 16,32,64")
    serving.add_argument("--no-dynamic-batching", action="store_true", help="turn the dynamic batcher off")
    serving.add_argument("--instances", type=int, help="instance count")
    serving.add_argument("--kind", choices=("KIND_CPU", "KIND_GPU", "KIND_AUTO"), help="instance kind")
    serving.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None,
                         help="warm the model up while it loads")
    serving.add_argument("--version", type=int, help="version folder to write")


def overrides(args: argparse.Namespace, entry: catalog.CatalogEntry) -> dict:
    """The serving flags given on the command line, merged into the entry's settings."""
    given = {"max_batch_size": args.max_batch_size, "warmup": args.warmup, "version": args.version}
    result = {k: v for k, v in given.items() if v is not None}
    batching = dict(entry.settings.get("dynamic_batching") or {})
    if args.max_queue_delay_us is not None:
        batching["max_queue_delay_us"] = args.max_queue_delay_us
    if args.preferred_batch_sizes is not None:
        batching["preferred_batch_sizes"] = args.preferred_batch_sizes
    if args.no_dynamic_batching:
        result["dynamic_batching"] = None
    elif args.max_queue_delay_us is not None or args.preferred_batch_sizes is not None:
        result["dynamic_batching"] = DynamicBatching(**batching)
    if args.instances is not None or args.kind is not None:
        groups = entry.settings.get("instance_groups") or [{}]
        base = groups[0] if isinstance(groups[0], dict) else groups[0].__dict__
        result["instance_groups"] = (InstanceGroup(count=args.instances or base.get("count", 1),
                                                   kind=args.kind or base.get("kind", "KIND_CPU")),)
    return result


def run(args: argparse.Namespace) -> int:
    import os

    repository = args.repository or Path(os.environ.get("MODEL_REPOSITORY", DEFAULT_REPOSITORY))
    try:
        entries = catalog.load(args.catalog)
        names = args.models or list(entries)
        unknown = [n for n in names if n not in entries]
        if unknown:
            raise ExportError(f"unknown models {unknown}; {args.catalog} lists {sorted(entries)}")
        from export.pipeline import export_entry  # torch is imported only when there is work

        for name in names:
            manifest = export_entry(entries[name], repository, force=args.force, **overrides(args, entries[name]))
            state = "up to date" if manifest.get("up_to_date") else "exported"
            print(f"{name}: {state} -> {Path(repository) / name}")
            for conversion in manifest["conversions"]:
                error = conversion["max_abs_error"]
                print(f"  {conversion['format']}/{conversion['precision']}: {conversion['status']}"
                      + (f", max |eager - export| = {error:.2e} (atol {conversion['atol']:.0e})" if error is not None else ""))
    except ExportError as exc:
        print(f"export: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export", description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))
