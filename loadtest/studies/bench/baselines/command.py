"""``python -m loadtest.studies.bench.baselines --model digits [--batcher] [--port 8080] [--workers 1]``: the FastAPI
baseline (``fastapi_app``) served by uvicorn, as ``make bench`` starts it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from deploy.server import DEFAULT_REPOSITORY
from loadtest.probes.inprocess import model_file
from loadtest.studies.bench.baselines.fastapi_app import ENV_PREFIX, app_for_model


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(
        prog="python -m loadtest.studies.bench.baselines", description="the FastAPI baseline under uvicorn"
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--batcher", action="store_true", help="use the asyncio micro-batcher")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument(
        "--max-batch", type=int, default=None, help="batcher rows per forward (default: the config's max_batch_size)"
    )
    parser.add_argument("--max-wait-ms", type=float, default=2.0, help="batcher wait after the first request")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's own)")
    args = parser.parse_args(argv)

    if args.workers > 1:  # uvicorn needs an import string to fork workers; they read the env
        os.environ.update(
            {
                ENV_PREFIX + "MODEL": args.model,
                ENV_PREFIX + "REPOSITORY": str(args.repository.resolve()),
                ENV_PREFIX + "BATCHER": "1" if args.batcher else "0",
                ENV_PREFIX + "MAX_BATCH": str(args.max_batch or ""),
                ENV_PREFIX + "MAX_WAIT_MS": str(args.max_wait_ms),
                ENV_PREFIX + "THREADS": str(args.threads or ""),
            }
        )
        model_file(args.model, args.repository)  # fail here, not in each worker
        uvicorn.run(
            "loadtest.studies.bench.baselines.fastapi_app:app_from_env",
            factory=True,
            host="127.0.0.1",
            port=args.port,
            workers=args.workers,
            log_level="warning",
            access_log=False,
        )
        return 0
    app = app_for_model(
        args.model,
        args.repository,
        batcher=args.batcher,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        threads=args.threads,
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0
