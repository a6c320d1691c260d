"""The flag groups the commands share, one spelling each: payloads, the server (repository, URLs of a running
one, the server/client CPU split), the output folder and trials.

A command adds the groups it takes (``tritonkit bench``, ``overload``, ``soak``, ``bench-generation``,
``first-request``, ``analyzer``); the parsed flags keep the names the rest of ``loadtest`` reads
(``args.http_url``, ``args.server_cpus``, ``args.warmup_s`` ...). An old spelling stays only as a hidden alias
that says its new name on stderr.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from loadtest.core.spec import PROTOCOLS
from loadtest.errors import LoadTestError, PayloadError
from loadtest.generators.payloads import DEFAULT_COUNT, INT_RANGE, PayloadOptions, parse_int_range, parse_shape
from loadtest.target.endpoints import default_repository, parse_cpus, split_cpus

__all__ = [
    "add_out_flag",
    "add_payload_flags",
    "add_p99_budget_flag",
    "add_protocol_flag",
    "argument_type",
    "add_server_flags",
    "add_trial_flags",
    "add_warmup_seconds",
    "deprecated_alias",
    "number",
    "payload_options",
    "positive",
    "resolve_cpus",
]


def argument_type(parse):
    """``parse`` as an argparse type: its LoadTestError (which names the bad value) is the one-line usage error."""

    def parsed(text: str):
        try:
            return parse(text)
        except LoadTestError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parsed.__name__ = parse.__name__
    return parsed


class _DeprecatedAlias(argparse.Action):
    """An old flag: stores into the new flag's ``dest`` and says the new name once on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is deprecated: use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def deprecated_alias(group, old: str, new: str, dest: str, **kwargs) -> None:
    """``old`` as a hidden alias of ``new`` (same ``dest``, same ``type``/``choices`` given in ``kwargs``)."""
    group.add_argument(old, dest=dest, action=_DeprecatedAlias, new=new, default=argparse.SUPPRESS, **kwargs)


def add_server_flags(
    parser: argparse.ArgumentParser,
    *,
    repository: bool = True,
    urls: bool = True,
    cpus: bool = True,
    split: bool = False,
) -> None:
    """The server group. ``repository``: ``--repository``; ``urls``: ``--http-url``/``--grpc-url``/
    ``--metrics-url`` of a running server (without them ``args.http_url`` ... are None: the command starts its
    own); ``cpus``: ``--server-cpus``/``--client-cpus`` (empty: no pinning); ``split``: the command splits the
    CPUs by default (``resolve_cpus``), and ``--no-split-cpus`` shares them."""
    group = parser.add_argument_group("server")
    if repository:
        group.add_argument(
            "--repository",
            type=Path,
            default=default_repository(),
            help="model repository (default: $MODEL_REPOSITORY or the project's model_repository/)",
        )
    if urls:
        group.add_argument(
            "--http-url",
            help="use the server already running here (host:port, explicit model control) instead of starting "
            "one; needs --grpc-url and --metrics-url",
        )
        group.add_argument("--grpc-url", help="its gRPC endpoint (host:port)")
        group.add_argument("--metrics-url", help="its Prometheus endpoint, e.g. http://127.0.0.1:8002/metrics")
    else:
        parser.set_defaults(http_url=None, grpc_url=None, metrics_url=None)
    if not cpus:
        return
    default = " (default: the upper half of this machine's)" if split else ""
    group.add_argument(
        "--server-cpus",
        type=argument_type(parse_cpus),
        default=frozenset(),
        metavar="CPUS",
        help=f"pin the local server and its stubs to these CPUs (e.g. 1 or 2-7){default}",
    )
    default = " (default: the lower half)" if split else ""
    group.add_argument(
        "--client-cpus",
        type=argument_type(parse_cpus),
        default=frozenset(),
        metavar="CPUS",
        help=f"pin the load generator (this process and the generators it starts) to these CPUs (e.g. 0){default}",
    )
    if split:
        group.add_argument(
            "--no-split-cpus",
            dest="split_cpus",
            action="store_false",
            help="without --server-cpus/--client-cpus: let the server and the load share every core (no pinning)",
        )
    else:
        parser.set_defaults(split_cpus=False)


def resolve_cpus(args: argparse.Namespace) -> tuple[frozenset[int], frozenset[int]]:
    """(client, server) CPUs: as given; else, for a command that splits them (``add_server_flags(split=True)``)
    and a local server, the lower half of this process's CPUs for the load and the upper half for the server
    (``target.split_cpus``). Sets ``args.client_cpus``/``args.server_cpus`` to the answer."""
    if args.split_cpus and not (args.server_cpus or args.client_cpus or getattr(args, "http_url", None)):
        args.client_cpus, args.server_cpus = split_cpus()
    return args.client_cpus, args.server_cpus


def number(kind: type = float, low: float = 0.0, *, strict: bool = True):
    """An argparse type: a finite number of ``kind`` above ``low`` (``strict``) or at least ``low``, else one
    line naming the text given."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (value > low if strict else value >= low) or (kind is float and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'>' if strict else '>='} {low:g}")
        return value

    return parse


def positive(kind: type = float):
    """An argparse type: a finite number of ``kind`` above 0 (``number``)."""
    return number(kind, 0.0, strict=True)


def add_p99_budget_flag(group, *, required: bool, what: str = "client-side p99 budget (ms)") -> None:
    """``--slo-p99-ms MS``: the p99 latency budget (``args.slo_p99_ms``; None when optional and not given)."""
    group.add_argument("--slo-p99-ms", type=positive(float), required=required, metavar="MS", help=what)


STREAM_BUDGETS = {"--slo-ttft-ms": "time to first token (TTFT)", "--slo-itl-ms": "inter-token latency (ITL)"}
"""A streamed (decoupled) model's budgets: flag -> the figure it bounds (``args.slo_ttft_ms``, ``args.slo_itl_ms``)."""


def add_stream_budget_flags(group, judged: str) -> None:
    """``--slo-ttft-ms MS`` and ``--slo-itl-ms MS`` (None when not given); ``judged`` says what the command does
    with a budget."""
    for flag, figure in STREAM_BUDGETS.items():
        group.add_argument(
            flag, type=positive(float), metavar="MS", help=f"streamed models: budget of the {figure} in ms; {judged}"
        )


def stream_budgets(args: argparse.Namespace) -> list[tuple[str, float]]:
    """The stream budgets given: (flag, ms)."""
    values = ((flag, getattr(args, flag[2:].replace("-", "_"))) for flag in STREAM_BUDGETS)
    return [(flag, value) for flag, value in values if value is not None]


def add_tool_args(parser: argparse.ArgumentParser, tool: str) -> None:
    """``-- FLAG ...``: more flags for ``tool``, passed as given (read them with :func:`tool_args`)."""
    parser.add_argument("tool_args", nargs=argparse.REMAINDER, help=f"after --: more flags for {tool}, as given")


def tool_args(args: argparse.Namespace) -> list[str]:
    """The flags after ``--`` for the tool a command runs (argparse keeps the ``--`` of a REMAINDER)."""
    rest = list(args.tool_args)
    return rest[1:] if rest[:1] == ["--"] else rest


def add_protocol_flag(group) -> None:
    """``--protocol grpc|http``: how the load reaches Triton (``args.protocol``, gRPC by default)."""
    group.add_argument("--protocol", choices=PROTOCOLS, default="grpc", help="grpc (default) or http")


def add_out_flag(parser: argparse.ArgumentParser, default: Path | None, what: str) -> None:
    """``--out FOLDER``; ``what`` says what goes there and the default."""
    parser.add_argument("--out", type=Path, default=default, metavar="FOLDER", help=what)


def add_warmup_seconds(group, default: float | None, what: str = "leading seconds of each run left out") -> None:
    """``--warmup-s S``: seconds at the start of a run that are not measured (``--warmup`` is its old name; a
    model's own warmup at load is ``--model-warmup``). A ``default`` of None: ``what`` says the default."""
    shown = what if default is None else f"{what} (default {default:g})"
    group.add_argument("--warmup-s", type=float, default=default, metavar="S", help=shown)
    deprecated_alias(group, "--warmup", "--warmup-s", "warmup_s", type=float)


def add_trial_flags(
    parser: argparse.ArgumentParser,
    *,
    trials: int,
    duration: float,
    warmup_s: float,
    trials_help: str,
    duration_help: str = "seconds of load per run",
) -> None:
    """The trials group: ``--trials N`` (rounds whose spread gives the intervals), ``--duration S`` per run and
    ``--warmup-s S`` left out of each."""
    group = parser.add_argument_group("trials")
    group.add_argument("--trials", type=int, default=trials, metavar="N", help=f"{trials_help} (default {trials})")
    group.add_argument(
        "--duration", type=float, default=duration, metavar="S", help=f"{duration_help} (default {duration:g})"
    )
    add_warmup_seconds(group, warmup_s)


def add_payload_flags(parser: argparse.ArgumentParser) -> None:
    """The payload flags (the same for ``tritonkit loadtest --model``, ``tritonkit tune`` and the studies)."""
    group = parser.add_argument_group(
        "payloads",
        "what the requests carry: by default random values from the served config; real data "
        "from a perf_analyzer input-data file or a Python function",
    )
    group.add_argument(
        "--shape",
        action="append",
        type=argument_type(parse_shape),
        default=[],
        metavar="NAME:D1,D2",
        help="shape of an input with a dynamic dim (-1), batch dim left out, as perf_analyzer "
        "spells it; repeat per input",
    )
    group.add_argument(
        "--int-range",
        type=argument_type(parse_int_range),
        default=INT_RANGE,
        metavar="LO:HI",
        help="random integer inputs take values LO <= v < HI (default 0:100)",
    )
    group.add_argument(
        "--input-data",
        type=Path,
        metavar="FILE.json",
        help="request data in perf_analyzer's input-data format, checked against the config",
    )
    group.add_argument(
        "--samples",
        metavar="FILE.py:FUNC",
        help="a function returning a list of dicts, input name -> numpy array (batch 1)",
    )
    group.add_argument("--payload-seed", type=int, default=0, help="seed of the random values (default 0)")
    group.add_argument(
        "--payload-count",
        type=int,
        default=DEFAULT_COUNT,
        help=f"how many random samples to cycle through (default {DEFAULT_COUNT})",
    )


def payload_options(args: argparse.Namespace) -> PayloadOptions:
    """The parsed payload flags as :class:`PayloadOptions` (PayloadError when they contradict each other, or
    name a file that is not there: said before any server is started or reached)."""
    if args.input_data is not None and not Path(args.input_data).is_file():
        raise PayloadError(f"--input-data {args.input_data}: no such file")
    return PayloadOptions(
        shapes=dict(args.shape or []),
        int_range=tuple(args.int_range),
        input_data=args.input_data,
        samples=args.samples,
        seed=args.payload_seed,
        count=args.payload_count,
    )
