"""The serving side of the GPU check: the local server, its answers, and the first request after ready.

Steps ``serve``, ``answers`` and ``first_request`` of the GPU check (:mod:`tritonkit.gpu.run`); each takes the
running ``Check`` and returns ``(status, detail)``.
"""

from __future__ import annotations

import shutil
import time

from tritonkit.gpu.state import Check

FIRST_REQUEST_VARIANT = "torchscript/fp16"
NOWARM_SUFFIX = "_nowarm"


def within(actual, expected, tolerance) -> tuple[bool, float]:
    import numpy as np

    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return False, float("inf")
    diff = np.abs(actual - expected)
    return bool((diff <= tolerance.atol + tolerance.rtol * np.abs(expected)).all()), float(diff.max())


def serve(check: Check):
    from deploy.server import LocalServer, ServerConfig, free_ports
    from export import config as config_io

    load = []
    for variants in check.served.values():
        load += list(variants.values())
        warm = variants.get(FIRST_REQUEST_VARIANT)
        if warm:  # the same model with its warmup removed, for the first-request comparison
            cold = warm + NOWARM_SUFFIX
            shutil.copytree(check.repository / warm, check.repository / cold, dirs_exist_ok=True)
            config = config_io.parse(check.repository / cold / "config.pbtxt")
            config.name = cold
            del config.model_warmup[:]
            from google.protobuf import text_format

            (check.repository / cold / "config.pbtxt").write_text(text_format.MessageToString(config))
            load.append(cold)
    http, grpc, metrics = free_ports()
    config = ServerConfig(
        model_repository=check.repository,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        load_models=tuple(load),
        ready_timeout_s=check.sizes.ready_timeout_s,
        exit_timeout_s=10,
    )
    check.server = LocalServer(config, workdir=check.workdir / "server")
    started = time.perf_counter()
    check.server.start()
    check.results["details"]["ready_seconds"] = round(time.perf_counter() - started, 2)
    return "ok", (
        f"ready in {time.perf_counter() - started:.1f} s on HTTP {config.http_url}, gRPC {config.grpc_url}; "
        f"{len(check.server.stub_pids())} stub processes; models {', '.join(load)}"
    )


def answers(check: Check):
    import torch

    from deploy.client import connect, infer
    from tritonkit.gpu.steps_export import exact_fp32

    # The first requests go to the first-request step; this one answers the other variants first.
    checked, problems = [], []
    for name, variants in check.served.items():
        model = check.zoo[name]
        seq = check.sizes.seq_len if model.seq_lengths else None
        inputs = model.random_inputs(check.sizes.answer_batch, seq, torch.Generator().manual_seed(1))
        with torch.no_grad(), exact_fp32(check.device != "cpu"):  # the reference is FP32, not TF32
            expected = model.module(*[x.to(check.device) for x in inputs])
        expected = expected if isinstance(expected, tuple) else (expected,)
        expected = [e.float().cpu().numpy() for e in expected]
        payload = {t.name: x.cpu().numpy() for t, x in zip(model.inputs, inputs, strict=True)}
        for text, served_as in variants.items():
            tolerance = model.tolerances[text.split("/")[1]]
            for protocol in ("http", "grpc"):
                url = check.server.config.http_url if protocol == "http" else check.server.config.grpc_url
                client = connect(protocol, url)
                try:
                    got = infer(client, served_as, payload, [t.name for t in model.outputs])
                finally:
                    client.close()
                for out, exp in zip(model.outputs, expected, strict=True):
                    ok, err = within(got[out.name], exp, tolerance)
                    checked.append(f"{served_as}/{protocol} {err:.1e}")
                    check.results["details"].setdefault("answers", []).append(
                        {
                            "model": served_as,
                            "protocol": protocol,
                            "output": out.name,
                            "max_abs_error": err,
                            "atol": tolerance.atol,
                            "rtol": tolerance.rtol,
                            "ok": ok,
                        }
                    )
                    if not ok:
                        problems.append(
                            f"{served_as} over {protocol}: max |served - eager| {err:.2e} "
                            f"> atol {tolerance.atol:.0e} + rtol {tolerance.rtol:.0e}"
                        )
    if problems:
        return f"failed: {'; '.join(problems)}", ""
    return "ok", "max |served - eager|: " + ", ".join(checked)


def first_request(check: Check):
    import torch

    from deploy.client import connect, infer
    from loadtest.core.client_stats import percentile  # numpy: kept out of the check's stdlib-only start

    client = connect("grpc", check.server.config.grpc_url)
    try:
        client.is_server_ready()
        for name, variants in check.served.items():
            warm = variants.get(FIRST_REQUEST_VARIANT)
            if not warm:
                continue
            model = check.zoo[name]
            seq = check.sizes.seq_len if model.seq_lengths else None
            payload = {
                t.name: x.cpu().numpy()
                for t, x in zip(
                    model.inputs, model.random_inputs(1, seq, torch.Generator().manual_seed(3)), strict=True
                )
            }
            firsts = {}
            for served_as in (warm, warm + NOWARM_SUFFIX):
                t0 = time.perf_counter()
                infer(client, served_as, payload)
                firsts[served_as] = (time.perf_counter() - t0) * 1e3
            steady = []
            for _ in range(check.sizes.steady_requests):
                t0 = time.perf_counter()
                infer(client, warm, payload)
                steady.append((time.perf_counter() - t0) * 1e3)
            p50 = percentile(steady, 50.0)
            check.figure("first_request_warmup", name, "ms", firsts[warm], FIRST_REQUEST_VARIANT)
            check.figure("first_request_no_warmup", name, "ms", firsts[warm + NOWARM_SUFFIX], FIRST_REQUEST_VARIANT)
            check.figure("steady_p50", name, "ms", p50, FIRST_REQUEST_VARIANT, requests=len(steady))
    finally:
        client.close()
    return "ok", f"batch 1 over gRPC, steady p50 of {check.sizes.steady_requests} requests"


def server_models(check: Check) -> list[str]:
    names = [n for v in check.served.values() for n in v.values()]
    return names + [
        v[FIRST_REQUEST_VARIANT] + NOWARM_SUFFIX for v in check.served.values() if FIRST_REQUEST_VARIANT in v
    ]
