"""``tritonkit export``: PyTorch models into the Triton repository, each export checked against eager.

Built-in models come from export/models.toml; your own model comes from ``--model-file FILE.py:FACTORY``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

from export import catalog, formats
from export.changes import ServingChanges
from export.errors import ExportError, RepositoryNotWritable, SpecError
from export.spec import INSTANCE_KINDS, PRECISIONS, TensorSpec
from export.user import pipeline as user_pipeline
from export.user import recorded
from export.variants import TARGETS, Variant
from tritonkit_errors import ExitStatus

DEFAULT_REPOSITORY = Path(__file__).resolve().parent.parent / "model_repository"

EPILOG = """\
examples:
  tritonkit export                              every model's cpu variants from export/models.toml
  tritonkit export digits --format onnx         one format of one model
  tritonkit export digits --max-batch-size 128 --instances 4 --max-queue-delay-us 500
  tritonkit export --target gpu                 the gpu variants (Torch-TensorRT, FP16 on CUDA), and the
                                                token generators' configs for the GPU (docs/gpu.md)
  tritonkit export --target gpu --generator-step-mode bls
  tritonkit export --target gpu --repository /models --seed-from model_repository
                                                an empty volume: Python models and ensembles, then exports
  tritonkit export --target gpu --configs-only --repository /tmp/gpu --seed-from model_repository
                                                the GPU containers' configs, no model files (review on a CPU)
  tritonkit export --model-file my_model.py:build --name mlp \\
      --input features:FP32:16 --output scores --max-batch-size 32
  tritonkit export --model-file my_cnn.py:build --name cnn \\
      --input image:FP32:3,224,224:NCHW --output logits
                                                an image model: image clients read the layout from its config
  tritonkit export --model-file enc.py:build --name encoder \\
      --input input_ids:INT64:-1 --input attention_mask:INT64:-1 \\
      --output last_hidden_state --output pooler_output --format torchscript --format onnx
                                                a transformers model: inputs by name, outputs from its dict

Each variant is converted in a staging folder, reloaded, and compared with the eager FP32 model on
random inputs at batch sizes 1, 3, 8 and the maximum, and on real data (top-1 agreement or cosine);
only one that passes replaces <repository>/<model>/<version>/ (model file + manifest.json) and
config.pbtxt. Unchanged exports are skipped.

Required and optional variants: on --target cpu every variant is required; on --target gpu only the
TorchScript ones are, and Torch-TensorRT and ONNX (CUDA / TensorRT providers) are optional, since
they depend on how the image was built. An optional variant that is skipped or fails prints
"optional:" on its line and does not change the exit status; with --seed-from (a container filling
its volume) a folder it left from an earlier run is removed, so the server never loads a stale one.
Variants named with --format, and every variant under --require-all, are required.

Exit status: 0 every required variant done, 1 a required check or conversion failed, 2 bad
arguments or a repository this user cannot write, 3 a required format's toolchain is missing here
(the other formats were still exported). With --seed-from, .export-complete is written on 0 only.
"""


OUTPUT_HELP = (
    "an output (repeatable): picks and orders a returned dict's or ModelOutput's tensors (nested: keys joined "
    "with _), names a tensor's or tuple's in order (default: all; unnamed ones output_0, output_1, ...)"
)


def _tensor(text: str) -> TensorSpec:
    try:
        return TensorSpec.parse(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="*", help="models from export/models.toml (default: all)")
    parser.add_argument(
        "--repository",
        type=Path,
        default=None,
        help="Triton model repository (default: $MODEL_REPOSITORY or ./model_repository)",
    )
    parser.add_argument("--catalog", type=Path, default=catalog.CATALOG, help="declarative model list")
    parser.add_argument(
        "--target",
        choices=TARGETS,
        default="cpu",
        help="cpu: the local server (default); gpu: the NGC container, KIND_GPU, needs CUDA",
    )
    parser.add_argument(
        "--format",
        action="append",
        choices=formats.names(),  # the registered formats, read when the parser is built
        dest="formats",
        help="export only these formats (repeatable; default: the catalog's variants)",
    )
    parser.add_argument(
        "--precision",
        action="append",
        choices=PRECISIONS,
        dest="precisions",
        help="with --format: precisions to export (repeatable; default fp32)",
    )
    parser.add_argument("--force", action="store_true", help="export even when up to date")
    parser.add_argument(
        "--generator-step-mode",
        choices=("inprocess", "bls"),
        default=None,
        help="how the token generators (text_generator) run their steps: inprocess (default with "
        "--target gpu: the steps on the generator's GPU, KV caches on the device) or bls (a "
        "request per step to the served KIND_GPU step models); see docs/gpu.md",
    )
    parser.add_argument(
        "--generator-precision",
        choices=("fp16", "fp32"),
        default="fp16",
        help="with --target gpu: the generators' step models (default fp16: smollm2_*_fp16)",
    )
    parser.add_argument(
        "--configs-only",
        action="store_true",
        help="write the configs the export would write for --target, and no model file "
        "(review a GPU target's configs on a CPU machine)",
    )
    parser.add_argument(
        "--require-all",
        action="store_true",
        help="every variant is required: a skipped or failed optional one fails the run",
    )
    parser.add_argument(
        "--seed-from",
        type=Path,
        metavar="REPOSITORY",
        help="first copy this repository's committed models (Python models, ensembles) into "
        "--repository; how the containers fill an empty volume",
    )
    user = parser.add_argument_group("your own model")
    user.add_argument("--model-file", metavar="FILE.py:FACTORY", help="a function returning an nn.Module")
    user.add_argument("--name", help="model name in the repository")
    user.add_argument(
        "--input",
        action="append",
        dest="inputs",
        type=_tensor,
        metavar="NAME:DTYPE:DIMS[:FORMAT]",
        help="input without the batch dim, -1 for dynamic dims (repeatable); passed to forward's parameter "
        "of that name (in the order given when no name is one); FORMAT NCHW or NHWC declares an image input's "
        "layout, e.g. image:FP32:3,224,224:NCHW",
    )
    user.add_argument("--output", action="append", dest="outputs", metavar="NAME", help=OUTPUT_HELP)
    user_pipeline.add_arguments(parser, _tensor)
    serving = parser.add_argument_group("serving settings (override the catalog)")
    serving.add_argument("--max-batch-size", type=int, help="largest batch; 0 disables batching")
    serving.add_argument("--max-queue-delay-us", type=int, help="dynamic batching: wait for a batch to fill")
    serving.add_argument(
        "--preferred-batch-sizes",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        help="dynamic batching: comma-separated, e.g. 16,32,64",
    )
    serving.add_argument("--max-queue-size", type=int, help="queue policy: refuse requests beyond this queue length")
    serving.add_argument("--queue-timeout-us", type=int, help="queue policy: reject requests queued longer")
    serving.add_argument("--no-dynamic-batching", action="store_true", help="turn the dynamic batcher off")
    serving.add_argument("--instances", type=int, help="instance count")
    serving.add_argument("--kind", choices=INSTANCE_KINDS, help="instance kind")
    serving.add_argument(
        "--model-warmup",
        dest="warmup",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="warm the model up while it loads (Triton's model_warmup)",
    )
    # The old spelling, hidden: bench's --warmup-s is seconds left out of a run, not this.
    serving.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None, help=argparse.SUPPRESS)
    serving.add_argument("--version", type=int, help="version folder to write")


def overrides(args: argparse.Namespace) -> dict:
    """The serving flags given on the command line: ``changes`` (a ``ServingChanges``) and ``version``."""
    changes = ServingChanges(
        max_batch_size=args.max_batch_size,
        warmup=args.warmup,
        max_queue_delay_us=args.max_queue_delay_us,
        preferred_batch_sizes=args.preferred_batch_sizes,
        max_queue_size=args.max_queue_size,
        default_timeout_us=args.queue_timeout_us,
        dynamic_batching=False if args.no_dynamic_batching else None,
        instances=args.instances,
        instance_kind=args.kind,
    )
    result: dict = {"changes": changes} if changes else {}
    if args.version is not None:
        result["version"] = args.version
    return result


def requested_variants(args: argparse.Namespace) -> list[Variant] | None:
    if args.precisions and not args.formats:
        raise SpecError("--precision needs --format")
    if not args.formats:
        return None
    return [Variant(f, p) for f, p in itertools.product(args.formats, args.precisions or ["fp32"])]


def _entries(args: argparse.Namespace, repository: Path) -> list[tuple[catalog.CatalogEntry, object, dict | None]]:
    """(entry, the user's model or None, what to record in its manifest or None) for each model to export."""
    if args.model_file:
        if args.models:
            raise SpecError("give either built-in model names or --model-file, not both")
        from export.user.model import user_entry

        return [user_entry(args.model_file, args.name, args.inputs or [], args.outputs or [], repository)]
    # Tuned settings belong to the built-in catalog; another catalog file stands alone.
    entries = catalog.load(args.catalog, catalog.TUNED if args.catalog == catalog.CATALOG else None)
    found = []
    for name in args.models:
        if name in entries:
            found.append((entries[name], None, None))
            continue
        previous = recorded.read(repository / name)  # a --model-file export, exported again by name
        if previous is None:
            raise SpecError(
                f"unknown model {name!r}: {args.catalog} lists {sorted(entries)}, and "
                f"{repository / name} holds no --model-file export"
            )
        inputs = [TensorSpec.parse(t) for t in previous["inputs"]]
        from export.user.model import user_entry

        found.append(user_entry(previous["model_file"], name, inputs, previous["outputs"], repository))
    return found or [(entries[n], None, None) for n in entries]


def ensure_writable(repository: Path) -> None:
    """Fail at once, naming the fix, when this user cannot write the repository (a volume it does not own)."""
    try:
        repository.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(prefix=".write-check-", dir=repository):
            pass
    except OSError as exc:
        raise RepositoryNotWritable(
            f"{repository} is not writable by uid {os.getuid()} gid {os.getgid()} ({exc.strerror or exc}); the "
            f"volume must be writable by this user (the images run as uid/gid 1000). On Kubernetes many CSI drivers "
            f"do not apply fsGroup to ReadWriteMany volumes: use a StorageClass whose volumes gid 1000 can write "
            f"(docs/production.md, Storage)"
        ) from None


def run(args: argparse.Namespace) -> int:
    repository = args.repository or Path(os.environ.get("MODEL_REPOSITORY", DEFAULT_REPOSITORY))
    outcomes = []  # (Export, required)
    try:
        ensure_writable(repository)
        variants = requested_variants(args)
        given = overrides(args)  # refused before anything is written
        pipeline = user_pipeline.plan_from(args)
        if args.seed_from:
            from export.seed import COMPLETE_MARKER, seed

            (repository / COMPLETE_MARKER).unlink(missing_ok=True)  # a repository mid-export is not complete
            copied = seed(args.seed_from, repository)
            print(f"seeded {repository} from {args.seed_from}: {', '.join(copied) or 'nothing to copy'}", flush=True)
        if args.configs_only:
            return _write_configs(args, repository, variants, given)
        from export.pipeline import export_entry  # torch is imported only when there is work

        exported = set()
        for entry, model, record in _entries(args, repository):
            first = (variants or entry.variants[args.target])[0]
            checked = (
                user_pipeline.check(pipeline, model, entry.spec(model, first, args.target, **given))
                if pipeline
                else None
            )
            done_all = export_entry(
                entry, repository, args.target, variants, args.force, model=model, record=record, **given
            )
            for done in done_all:
                required = variants is not None or args.require_all or done.variant.required_on(args.target)
                outcomes.append((done, required))
                state = "up to date" if done.up_to_date else done.result.status
                note = "" if required or done.result.ok else "optional: "
                print(
                    f"{done.spec.name:<28} {str(done.variant):<20} {state:<10} {note}{done.result.details()}",
                    flush=True,
                )
            if all(done.result.ok for done in done_all):
                exported.add(entry.name)
                if checked:
                    for line in user_pipeline.write(checked, _called(done_all), repository):
                        print(line, flush=True)
        _write_generators(args, repository, exported)
    except ExportError as exc:
        print(f"export: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    missed = [done for done, required in outcomes if not required and not done.result.ok]
    if missed:
        print(
            f"export: {len(missed)} optional variant(s) not exported, the run goes on: "
            f"{', '.join(done.spec.name for done in missed)}",
            flush=True,
        )
        if args.seed_from:
            _remove_stale(repository, [done.spec.name for done in missed])
    required = [done.result.status for done, needed in outcomes if needed]
    if any(s in ("failed", "mismatch") for s in required):
        failed = [d for d, needed in outcomes if needed and d.result.status in ("failed", "mismatch")]
        print(
            f"export: error: some exports failed their checks ({_listed(failed)}; see their lines); exported: "
            f"{_listed(d for d, _ in outcomes if d.result.ok) or 'none'}; the failed keep their previous files",
            file=sys.stderr,
        )
        return ExitStatus.FAILED
    if "skipped" in required:
        print(
            "export: error: a required variant was skipped: its toolchain is missing here (see its line)",
            file=sys.stderr,
        )
        return ExitStatus.BROKEN  # a toolchain missing here: the environment, not the model
    if args.seed_from:
        from export.seed import mark_complete

        mark_complete(
            repository,
            args.target,
            [done.result.status for done, _ in outcomes],
            not_exported=[done.spec.name for done in missed],
            optional=[done.spec.name for done, required in outcomes if not required and done.result.ok],
        )
    return ExitStatus.OK


def _called(exports) -> str:
    """The variant a pipeline calls: TorchScript FP32 when exported, else the first one."""
    return next((d.spec for d in exports if str(d.variant) == "torchscript/fp32"), exports[0].spec).name


def _listed(exports) -> str:
    return ", ".join(f"{done.spec.name} {done.variant}" for done in exports)


def _write_configs(args: argparse.Namespace, repository: Path, variants, given: dict) -> int:
    from export.pipeline import write_configs

    written = set()
    for entry, model, _ in _entries(args, repository):
        for spec in write_configs(entry, repository, args.target, variants, model=model, **given):
            print(f"{spec.name:<28} config written ({args.target}; no model file)", flush=True)
        written.add(entry.name)
    _write_generators(args, repository, written)
    return ExitStatus.OK


def _write_generators(args: argparse.Namespace, repository: Path, exported: set[str]) -> None:
    """The token generators' configs for the target; one is rewritten when this run wrote all its step models."""
    if args.model_file or not (args.target == "gpu" or args.generator_step_mode):
        return
    from export.token_generator import write_for_target

    for path in write_for_target(
        repository,
        catalog.load(args.catalog),
        args.target,
        args.generator_step_mode or "inprocess",
        args.generator_precision,
        exported,
    ):
        print(f"{path.parent.name:<28} {'generator config':<20} {'written':<10} for {args.target}", flush=True)


def _remove_stale(repository: Path, names: list[str]) -> None:
    """A model folder that this run did not export was left by an earlier one (another release, maybe)."""
    for name in names:
        folder = repository / name
        if folder.is_dir():
            shutil.rmtree(folder)
            print(f"export: removed {folder}, left by an earlier export", flush=True)


HELP = "export models (TorchScript, ONNX, Torch-TensorRT), check them, write config.pbtxt"


def arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(handler=run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
