"""The generation side of the GPU check: text_generator on the GPU, FP32 and FP16 steps, in-flight batching on.

Step ``generation`` of the GPU check (:mod:`tritonkit.gpu.run`). It exports the SmolLM2 steps (``smollm2_prefill`` /
``smollm2_decode``, TorchScript FP32 and FP16, parity against eager FP32 on the GPU) into a repository
of its own and writes two generators with ``export.token_generator`` exactly as ``export --target gpu``
does (``KIND_GPU``, the steps in the generator's process on ``cuda:<device_id>``): ``text_generator``
on the FP32 steps and ``text_generator_fp16`` on the FP16 ones (the default GPU config). It serves
both from a server of its own and, for 1, 8 and 32 concurrent gRPC streams (greedy, 64 tokens each),
records tokens/s (tokens the generator logged over the wall time) and the mean time to first token.

The dry run takes the tiny random-weight steps on the CPU target, writes the same GPU configs to
``OUT_DIR/gpu-configs`` (checked for ``KIND_GPU``), serves ``KIND_CPU`` copies and runs the
measurement with 1 and 2 streams of 4 tokens; its figures are recorded as ``skipped: dry run``.
"""

from __future__ import annotations

import shutil

from tritonkit.gpu.state import Check

PRECISIONS = {"fp32": "text_generator", "fp16": "text_generator_fp16"}
STREAMS, TOKENS = (1, 8, 32), 64
DRY_STREAMS, DRY_TOKENS = (1, 2), 4


def generation(check: Check):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from deploy.lifecycle import local_server
    from deploy.server import DEFAULT_REPOSITORY, ServerConfig, free_ports
    from export import catalog, zoo
    from export import config as config_io
    from export import token_generator as gen
    from export.pipeline import export_entry
    from export.variants import Variant
    from loadtest.studies.generation.command import PROMPTS, served_row
    from tritonkit.gpu.steps_export import eager_on_cpu, exact_fp32, on_device

    steps = ("smollm2_tiny_prefill", "smollm2_tiny_decode") if check.dry_run else ("smollm2_prefill", "smollm2_decode")
    repo = check.workdir / "generation_repository"
    entries = catalog.load()
    problems = []
    # Both steps are built on the CPU before either moves: they share one Llama (lru_cache), and the decode
    # step's example and reference inputs come from running prefill on CPU token ids when it is built.
    built = {name: zoo.build(entries[name].builder) for name in steps}
    for name in steps:
        model = on_device(built[name], check.device)
        for text in ("torchscript/fp32", "torchscript/fp16"):
            with eager_on_cpu(check.device != "cpu"), exact_fp32(check.device != "cpu"):
                exported = export_entry(
                    entries[name], repo, check.target, [Variant.parse(text)], force=True, model=model
                )
            done = exported[0]
            check.results["exports"].append(
                {
                    "model": name,
                    "variant": text,
                    "served_as": done.spec.name,
                    "status": done.result.status,
                    "max_abs_error": done.result.max_abs_error,
                    "atol": done.result.atol,
                    "real_data": done.result.real_data,
                    "message": done.result.message,
                    "device": check.device,
                }
            )
            if not done.result.ok:
                problems.append(f"{done.spec.name} {done.result.status}: {done.result.message}")
    if problems:
        return f"failed: {'; '.join(problems)}", ""

    committed = config_io.parse(DEFAULT_REPOSITORY / "text_generator" / "config.pbtxt")
    for precision, served_as in PRECISIONS.items():
        config = gen.for_target(committed, entries, "gpu", "inprocess", precision)
        config.name = served_as
        kinds = {mc.ModelInstanceGroup.Kind.Name(g.kind) for g in config.instance_group}
        if kinds != {"KIND_GPU"}:
            problems.append(f"{served_as}: instance kinds {sorted(kinds)}")
        (check.out_dir / "gpu-configs" / served_as).mkdir(parents=True, exist_ok=True)
        (check.out_dir / "gpu-configs" / served_as / "config.pbtxt").write_text(gen.render(config, "gpu"))
        if check.dry_run:  # the GPU config names the real steps; the dry run serves the tiny ones on the CPU
            for key in gen.STEP_PARAMETERS:
                config.parameters[key].string_value = Variant("torchscript", precision).model_name(
                    steps[0] if key == "PREFILL_MODEL" else steps[1]
                )
            del config.instance_group[:]
            config.instance_group.append(mc.ModelInstanceGroup(count=1, kind=mc.ModelInstanceGroup.KIND_CPU))
        shutil.copytree(
            DEFAULT_REPOSITORY / "text_generator",
            repo / served_as,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "config.pbtxt"),
        )
        (repo / served_as / "config.pbtxt").write_text(text_format.MessageToString(config))
    if problems:
        return f"failed: {'; '.join(problems)}", ""

    streams, tokens = (DRY_STREAMS, DRY_TOKENS) if check.dry_run else (STREAMS, TOKENS)
    http, grpc, metrics = free_ports()
    config = ServerConfig(
        model_repository=repo,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        load_models=tuple(PRECISIONS.values()),
        exit_timeout_s=10,
        ready_timeout_s=check.sizes.ready_timeout_s,
    )
    rows = []
    with local_server(config, workdir=check.workdir / "generation_server") as server:
        for precision, served_as in PRECISIONS.items():
            for n in streams:
                prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
                r = served_row(server, served_as, prompts, tokens)
                variant = f"torchscript/{precision}"
                check.figure(
                    "generation_tokens_per_s",
                    "text_generator",
                    "tokens/s",
                    r["tokens_per_s"],
                    variant,
                    streams=n,
                    tokens_per_stream=tokens,
                )
                check.figure("generation_ttft_mean", "text_generator", "s", r["ttft_mean"], variant, streams=n)
                rows.append(f"{precision} x{n}: {r['tokens_per_s']:.1f} tokens/s, TTFT {r['ttft_mean']:.3f} s")
    if server.left_behind:
        return f"failed: left behind {server.left_behind}", ""
    check.results["details"]["generation"] = rows
    return "ok", f"{'tiny steps on the CPU (dry run)' if check.dry_run else check.device}: " + "; ".join(rows)
