"""`tritonkit aiperf`: NVIDIA AIPerf against the served generator (streamed) or a text-in model (infer), over HTTP.

AIPerf 0.13.0 lives in its own venv (``.venv-aiperf``, pinned in deploy/aiperf-requirements.txt, installed by
``deploy/setup.sh aiperf`` on its first use). It speaks HTTP only; its ``template`` endpoint renders each request
from a Jinja payload written here into ``--out/templates``:

* a generator (``text_generator``): ``POST v2/models/MODEL/generate_stream`` with ``text_input``, ``stream``
  true and ``max_tokens``, plus ``ignore_eos`` true so every answer has ``--output-tokens`` tokens; the streamed
  ``text_output`` is the text AIPerf times (TTFT, ITL) and counts with the generator's own tokenizer (its version
  folder is a Hugging Face tokenizer folder: ``tokenizer.json`` + ``tokenizer_config.json``);
* any other model with one text input (``text_embedder``): ``POST v2/models/MODEL/infer`` with that input,
  its first FP32 output read back; tokens counted with the embedder's own tokenizer (MiniLM's folder, the one
  the ``tokenize`` step loads).

AIPerf cannot read Triton 2.51's metrics port (its probe is a HEAD, which that port answers 405), so it runs
with ``--no-server-metrics``; this command reads Triton's own counters for the model before and after the run
instead (``loadtest.target.server_metrics``). Its export (``--out/artifacts/profile_export_aiperf.json`` and
``.csv``, one record per request in ``profile_export.jsonl``) is folded into ``--out/results.json`` and
``summary.md``: TTFT, ITL, output tokens/s, requests, goodput within ``--slo-ttft-ms``/``--slo-itl-ms`` (AIPerf's
``--goodput``; reported, not a gate), and whether every answer had the asked number of tokens.

Exit status: 0 done (for a generator, every answer had ``--output-tokens`` tokens); 1 an answer of another
length; 2 a bad argument (a tokenizer folder that is not one, a model without one text input); 3 AIPerf missing
and its install failed, AIPerf failed (one line naming its log) or the server failed. The local server is
stopped on every exit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from backends import text
from deploy import tools
from deploy.server import PROJECT_ROOT
from export.config import parse
from export.token_generator import is_generator, served_models
from loadtest.cli import flags
from loadtest.generators.locust import runner
from loadtest.reports.writer import commit, save_report
from loadtest.studies.aiperf import export as aiperf_export
from loadtest.target import endpoints as target
from loadtest.target import server_metrics
from tritonkit_errors import ExitStatus

AIPERF = PROJECT_ROOT / ".venv-aiperf" / "bin" / "aiperf"
REPORTS = Path("reports") / "aiperf"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def embedder_tokenizer() -> Path:
    """MiniLM's tokenizer folder, the one the ``tokenize`` step of ``text_embedder`` loads."""
    return text.model_path()


DEFAULT_TOKENIZERS = {"text_embedder": embedder_tokenizer}
"""Models whose tokenizer is not in their own version folder."""


def check_tokenizer(folder: Path) -> Path:
    """``folder`` when it is a Hugging Face tokenizer folder that loads offline, else ``ValueError`` naming it."""
    missing = [name for name in TOKENIZER_FILES if not (Path(folder) / name).is_file()]
    if missing:
        raise ValueError(f"--tokenizer {folder} is not a tokenizer folder: no {' or '.join(missing)}")
    return Path(folder).resolve()


def endpoint(repository: Path, model: str) -> dict:
    """How AIPerf reaches ``model``: its path, the payload template, the response field and whether it streams."""
    path = Path(repository) / model / "config.pbtxt"
    if not path.is_file():
        raise ValueError(target.missing_model(repository, model))
    config = parse(path)
    if is_generator(config):
        body = '{"text_input": {{ text|tojson }}, "stream": true, "max_tokens": {{ max_tokens }}}'
        return {"path": f"/v2/models/{model}/generate_stream", "template": body, "field": "text_output", "stream": True}
    texts = [i for i in config.input if i.data_type == mc.TYPE_STRING]
    if len(config.input) != 1 or not texts:
        raise ValueError(f"{model}: AIPerf sends one text; the model's inputs are {[i.name for i in config.input]}")
    outputs = [o.name for o in config.output if o.data_type == mc.TYPE_FP32]
    if not outputs:
        raise ValueError(f"{model}: no FP32 output for AIPerf to read back")
    shape = [1, 1] if config.max_batch_size > 0 else [1]
    body = json.dumps({"inputs": [{"name": texts[0].name, "shape": shape, "datatype": "BYTES", "data": ["@"]}]})
    return {
        "path": f"/v2/models/{model}/infer",
        "template": body.replace('"@"', "{{ text|tojson }}"),
        "field": f"outputs[?name=='{outputs[0]}'] | [0].data",
        "stream": False,
    }


def extra_inputs(template: Path, how: dict) -> str:
    """AIPerf's ``--extra-inputs`` as one JSON object: its ``key:value`` form splits at colons and commas, which a
    JMESPath or a path may hold. ``ignore_eos`` goes to the generator as a request parameter."""
    extra = {"payload_template": str(template), "response_field": how["field"]}
    if how["stream"]:
        extra["ignore_eos"] = True
    return json.dumps(extra)


def command(args: argparse.Namespace, http_url: str, tokenizer: Path, how: dict, template: Path) -> list[str]:
    argv = [
        str(AIPERF),
        "profile",
        "--model",
        args.model,
        "--endpoint-type",
        "template",
        "--endpoint",
        how["path"],
        *(["--streaming"] if how["stream"] else []),
        "--url",
        f"http://{http_url}",
        "--tokenizer",
        str(tokenizer),
        "--extra-inputs",
        extra_inputs(template, how),
        "--concurrency",
        str(args.concurrency),
        "--request-count",
        str(args.requests),
        "--num-dataset-entries",
        str(args.requests),
        "--synthetic-input-tokens-mean",
        str(args.input_tokens),
        "--synthetic-input-tokens-stddev",
        "0",
        *(["--output-tokens-mean", str(args.output_tokens), "--output-tokens-stddev", "0"] if how["stream"] else []),
        "--random-seed",
        "0",
        "--num-profile-runs",
        str(args.runs),
        "--artifact-dir",
        str(args.out / "artifacts"),
        "--no-server-metrics",  # Triton 2.51's metrics port answers AIPerf's HEAD probe with 405
        "--no-gpu-telemetry",
        "--ui-type",
        "none",
    ]
    goodput = " ".join(f"{name}:{budget:g}" for name, budget in budgets(args).items())  # one argument
    return argv + (["--goodput", goodput] if goodput else []) + flags.tool_args(args)


def budgets(args: argparse.Namespace) -> dict[str, float]:
    """AIPerf's ``--goodput`` SLOs (ms) from the project's stream budgets."""
    pairs = {"time_to_first_token": args.slo_ttft_ms, "inter_token_latency": args.slo_itl_ms}
    return {name: budget for name, budget in pairs.items() if budget is not None}


def aiperf_env(environ, scratch: Path) -> dict[str, str]:
    """AIPerf's environment: without the hub's offline switches, with which AIPerf 0.13 takes a local tokenizer
    folder for a hub name and fails (a path is never looked up on the hub); its dataset files in `scratch`, which
    the command removes (by default AIPerf leaves an `aiperf_mmap_*` folder in the system's temp folder per run)."""
    env = {k: v for k, v in environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return env | {"TOKENIZERS_PARALLELISM": "false", "AIPERF_DATASET_MMAP_BASE_PATH": str(scratch)}


def run(args: argparse.Namespace) -> int:
    for name in ("requests", "concurrency", "input_tokens", "output_tokens", "runs"):
        if getattr(args, name) < 1:
            return _fail(f"--{name.replace('_', '-')} must be at least 1", ExitStatus.USAGE)
    try:
        how = endpoint(args.repository, args.model)
        default = DEFAULT_TOKENIZERS.get(args.model, lambda: args.repository / args.model / "1")
        tokenizer = check_tokenizer(args.tokenizer or default())
    except ValueError as exc:
        return _fail(str(exc), ExitStatus.USAGE)
    try:
        tools.ensure(AIPERF, "aiperf", "AIPerf", "first use of tritonkit aiperf")
    except tools.ToolMissing as exc:
        return _fail(str(exc), ExitStatus.BROKEN)
    shutil.rmtree(args.out / "artifacts", ignore_errors=True)  # a previous run's records would be counted too
    (args.out / "templates").mkdir(parents=True, exist_ok=True)
    template = args.out / "templates" / f"{args.model}.json.jinja"
    template.write_text(how["template"] + "\n")
    log = args.out / "aiperf.log"

    def profile(endpoints, _server):
        before = server_metrics.snapshot(endpoints.http, endpoints.metrics, args.model)
        cmd = command(args, endpoints.http, tokenizer, how, template)
        print(f"aiperf: {args.requests} requests to {how['path']}; log: {log}", flush=True)
        # AIPerf's workers run in its group, ended with it; its dataset files go with the scratch folder
        with open(log, "wb") as sink, tempfile.TemporaryDirectory(prefix="tritonkit-aiperf-") as scratch:
            env = aiperf_env(os.environ, Path(scratch))
            code = runner.run_in_group(
                cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=args.out
            )
        after = server_metrics.snapshot(endpoints.http, endpoints.metrics, args.model)
        return code, cmd, before, after

    status, value = target.run_with_server(args, served_models(args.repository, args.model), profile)
    if status != 0:
        return status
    code, cmd, before, after = value
    if code != 0:
        return _fail(f"AIPerf exited with status {code}: see {log}", ExitStatus.BROKEN)
    try:
        found = aiperf_export.read(args.out / "artifacts")
    except ValueError as exc:
        return _fail(f"{exc}; AIPerf's log: {log}", ExitStatus.BROKEN)
    server = server_metrics.delta(before, after, found.get("request_latency", {}).get("avg", float("nan")))
    data = report_data(args, cmd, how, found, server)
    save_report(data, args.out, aiperf_export.render)
    print(aiperf_export.render(data), end="")
    print(f"aiperf: report in {args.out} (results.json, summary.md), AIPerf's exports in {args.out / 'artifacts'}")
    lengths = data["lengths"]
    if lengths["checked"] and not lengths["ok"]:
        wrong = lengths["answers"] - lengths["by_length"].get(str(args.output_tokens), 0)
        return _fail(
            f"{wrong} of {lengths['answers']} answers were not {args.output_tokens} tokens long: see "
            f"{args.out / 'summary.md'}",
            ExitStatus.FAILED,
        )
    return ExitStatus.OK


def report_data(args, cmd: list[str], how: dict, found: dict, server) -> dict:
    lengths = aiperf_export.lengths(args.out / "artifacts", args.output_tokens) if how["stream"] else {}
    return {
        "model": args.model,
        "endpoint": how["path"],
        "streaming": how["stream"],
        "requests": args.requests,
        "concurrency": args.concurrency,
        "input_tokens": args.input_tokens,
        "output_tokens": args.output_tokens,
        "runs": args.runs,
        "budgets_ms": budgets(args),
        "aiperf": found,
        "lengths": {"checked": bool(how["stream"]), **lengths},
        "server": dataclasses.asdict(server),
        "command": cmd,
        "commit": commit(),
    }


def _fail(message: str, status: int) -> int:
    print(f"aiperf: error: {message}", file=sys.stderr)
    return status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="text_generator", help="the served model (default text_generator)")
    parser.add_argument("--requests", type=int, default=24, help="requests (and distinct prompts; default 24)")
    parser.add_argument("--concurrency", type=int, default=2, help="requests in flight (default 2)")
    parser.add_argument("--input-tokens", type=int, default=32, help="synthetic prompt length (default 32)")
    parser.add_argument("--output-tokens", type=int, default=16, help="tokens per answer of a generator (default 16)")
    parser.add_argument(
        "--runs", type=int, default=1, help="AIPerf's profile runs; above 1 it reports intervals (default 1)"
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        help="a Hugging Face tokenizer folder (default: the model's version folder; text_embedder: MiniLM's)",
    )
    group = parser.add_argument_group("stream budgets (goodput)")
    flags.add_stream_budget_flags(group, "AIPerf's goodput counts only requests within it")
    flags.add_out_flag(parser, REPORTS, f"report and AIPerf's exports (default {REPORTS})")
    flags.add_tool_args(parser, "aiperf profile")
    flags.add_server_flags(parser)


HELP = "NVIDIA AIPerf over HTTP against text_generator (streamed) or text_embedder: TTFT, ITL, goodput"


def arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    args.out = args.out.resolve()
    args.repository = Path(args.repository).resolve()
    return run(args)
