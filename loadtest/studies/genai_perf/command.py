"""`tritonkit genai-perf`: NVIDIA's GenAI-Perf against the served token generator, as LLM users benchmark Triton.

GenAI-Perf 0.0.16 lives in its own venv (``.venv-genai-perf``, pinned in deploy/genai-perf-requirements.txt,
installed by ``deploy/setup.sh genai-perf`` on its first use) and drives the generator through the vLLM backend's
tensors (``--endpoint-type kserve --backend vllm``), which ``text_generator`` takes (backends/llm_request.py). It runs
the project's perf_analyzer (.venv/bin, the 2.51 binary), and counts tokens with a tokenizer folder written
here from the generator's own ``tokenizer.json`` and ``chat_template.json`` (both from the SmolLM2 GGUF), so
nothing comes from a hub. Its table (time to first token, inter-token latency, output token throughput, ...)
is printed as GenAI-Perf prints it; its exports land in ``--out`` (``artifacts/*/profile_export_genai_perf.json``).

Exit status: GenAI-Perf's own (0 done); 2 a bad argument, or GenAI-Perf or perf_analyzer missing and its install
failed (one line naming the log); 3 the server failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from backends import chat
from deploy import tools
from deploy.server import PROJECT_ROOT
from export.token_generator import served_models
from loadtest.cli import flags
from loadtest.generators.locust import runner
from loadtest.generators.perf_analyzer import perf
from loadtest.target import endpoints as target
from tritonkit_errors import ExitStatus

GENAI_PERF = PROJECT_ROOT / ".venv-genai-perf" / "bin" / "genai-perf"
PERF_ANALYZER = perf.PERF_ANALYZER  # on its PATH: GenAI-Perf runs it
REPORTS = Path("reports") / "genai-perf"
EXPORT = "profile_export_genai_perf.json"


def tokenizer_folder(version_dir: Path, out: Path) -> Path:
    """A Hugging Face tokenizer folder (``tokenizer.json`` + ``tokenizer_config.json``) from the generator's
    files, which ``transformers.AutoTokenizer`` and so GenAI-Perf load without a hub."""
    tokenizer, template = version_dir / "tokenizer.json", version_dir / chat.FILE_NAME
    if not tokenizer.is_file():
        raise ValueError(f"{version_dir} has no tokenizer.json: GenAI-Perf counts tokens with the model's tokenizer")
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    if template.is_file():
        chat.ChatTemplate.load(template).save(out / chat.FILE_NAME)
    else:
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
        (out / chat.HF_CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n")
    return out


def command(args: argparse.Namespace, grpc_url: str, tokenizer: Path) -> list[str]:
    return [
        str(GENAI_PERF),
        "profile",
        "-m",
        args.model,
        "--endpoint-type",
        "kserve",
        "--backend",
        "vllm",
        "--streaming",
        "-u",
        grpc_url,
        "--tokenizer",
        str(tokenizer),
        "--concurrency",
        str(args.concurrency),
        "--num-prompts",
        str(args.requests),
        "--request-count",
        str(args.requests),
        "--synthetic-input-tokens-mean",
        str(args.input_tokens),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(args.output_tokens),
        "--output-tokens-mean-deterministic",  # min_tokens = max_tokens: every answer is as long, so runs compare
        "--artifact-dir",
        str(args.out / "artifacts"),
        *flags.tool_args(args),
    ]


def figures(out: Path) -> dict:
    """TTFT, ITL (ms) and output token throughput from the run's GenAI-Perf export."""
    exports = sorted((out / "artifacts").glob(f"*/{EXPORT}"), key=lambda p: p.stat().st_mtime)
    if not exports:
        return {}
    data = json.loads(exports[-1].read_text())
    keys = ("time_to_first_token", "inter_token_latency", "output_token_throughput", "request_throughput")
    return {k: data[k] for k in keys if k in data}


def run(args: argparse.Namespace) -> int:
    for name in ("requests", "concurrency", "input_tokens", "output_tokens"):
        if getattr(args, name) < 1:
            print(f"genai-perf: error: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return ExitStatus.USAGE
    try:
        tokenizer = tokenizer_folder(args.repository / args.model / "1", args.out / "tokenizer")
    except ValueError as exc:
        print(f"genai-perf: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    # Installed on first use, once the arguments are known to be good.
    try:
        tools.ensure(GENAI_PERF, "genai-perf", "GenAI-Perf", "first use of tritonkit genai-perf")
        tools.ensure(PERF_ANALYZER, "perf-analyzer", "perf_analyzer", "first use of tritonkit genai-perf")
    except tools.ToolMissing as exc:
        print(f"genai-perf: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE

    def profile(endpoints, _server) -> int:
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the 2.51 perf_analyzer
        env.setdefault("COLUMNS", "160")  # its table, one row per line
        returncode = runner.run_in_group(command(args, endpoints.grpc, tokenizer), env=env, cwd=args.out)
        found = figures(args.out)
        if returncode == 0 and found:
            print(f"genai-perf: exports in {args.out / 'artifacts'}")
        return returncode

    args.out.mkdir(parents=True, exist_ok=True)
    status, value = target.run_with_server(args, served_models(args.repository, args.model), profile)
    return value if status == 0 else status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="text_generator", help="the served generator (default text_generator)")
    parser.add_argument("--requests", type=int, default=20, help="requests (and distinct prompts; default 20)")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight (default 1)")
    parser.add_argument("--input-tokens", type=int, default=64, help="synthetic prompt length (default 64)")
    parser.add_argument("--output-tokens", type=int, default=64, help="tokens per answer (default 64)")
    parser.add_argument("--out", type=Path, default=REPORTS, help=f"exports folder (default {REPORTS})")
    flags.add_tool_args(parser, "genai-perf profile")
    flags.add_server_flags(parser)


HELP = "NVIDIA GenAI-Perf against the served token generator: TTFT, inter-token latency, tokens/s"


def arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    args.out = args.out.resolve()
    args.repository = Path(args.repository).resolve()
    return run(args)
