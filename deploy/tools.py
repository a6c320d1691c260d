"""Side tools installed on first use: ``ensure`` runs ``deploy/setup.sh LAYER`` when a command's tool is missing.

``make setup`` installs only what the demo runs; perf_analyzer, Model Analyzer and GenAI-Perf come with the first
command that needs them, in one line on stderr saying what and why, the set-up's own output in a log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from deploy.errors import DeployError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SETUP = PROJECT_ROOT / "deploy" / "setup.sh"
LOGS = PROJECT_ROOT / "reports" / "setup"


class ToolMissing(DeployError):
    """A side tool is missing and its layer of the set-up could not install it; the message names the log."""


def ensure(tool: Path, layer: str, name: str, why: str) -> Path:
    """``tool``, installed first by ``deploy/setup.sh LAYER`` when it is missing (``name`` and ``why`` make the one
    line printed, e.g. "Model Analyzer", "first use of tritonkit analyzer"); ``ToolMissing`` when that fails."""
    if tool.is_file():
        return tool
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{layer}.log"
    print(f"setup: installing {name} ({why}); log: {log}", file=sys.stderr, flush=True)
    env = dict(os.environ, SETUP_WHY=why)
    with open(log, "wb") as sink:
        try:
            code = subprocess.run(
                ["bash", str(SETUP), layer], stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            ).returncode
        except OSError as exc:  # no bash: the same one line as a failed install
            sink.write(f"{exc}\n".encode())
            code = 1
    if code != 0 or not tool.is_file():
        raise ToolMissing(f"{name} is missing ({tool}) and could not be installed: see {log}")
    return tool
