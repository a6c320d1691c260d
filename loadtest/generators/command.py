"""``python -m loadtest.generators SCHEDULE OUT [--speed S]``: a recorded schedule (``arrivals.Replay``) written as
perf_analyzer's ``--request-intervals`` file, so perf_analyzer plays the same arrivals as Locust does."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from loadtest.generators.arrivals import ArrivalError, parse_arrival, write_request_intervals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.generators",
        description="Write a recorded schedule as perf_analyzer's --request-intervals file (µs, one a line).",
    )
    parser.add_argument("schedule", help="the schedule (.jsonl or .csv; docs/load-testing.md)")
    parser.add_argument("out", type=Path, help="the intervals file to write")
    parser.add_argument("--speed", type=float, help="play this many times faster than recorded (default 1)")
    args = parser.parse_args(argv)
    try:
        replay = parse_arrival(f"replay:{args.schedule}", "schedule")
        factor = dataclasses.replace(replay, speed=args.speed).factor(None)
    except ArrivalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_request_intervals(args.out, (t / factor for t in replay.offsets))
    print(f"{args.out}: {len(replay.offsets)} intervals, {replay.describe()}")
    return 0
