"""deploy/quiet.py: library noise to the log, the command's own lines to the terminal, in a child process whose
stdout and stderr are real descriptors (as a terminal's are)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from deploy import quiet

PROJECT_ROOT = Path(__file__).resolve().parents[2]

NOISY = textwrap.dedent("""
    import logging, os, sys, warnings
    from pathlib import Path
    from deploy import quiet

    with quiet.noise_to(Path(sys.argv[1]), own=quiet.PROJECT | {"__main__"}):
        warnings.warn("a library's UserWarning")
        library = logging.getLogger("somelib")
        library.addHandler(logging.StreamHandler())  # bound when the library is imported: inside the block
        library.warning("a library's notice")
        logging.getLogger("otherlib").warning("a notice through logging's last resort")
        os.write(2, b"a C++ write to fd 2\\n")
        os.write(1, b"a C++ write to fd 1\\n")
        print("the command's own line")
        print("the command's own error", file=sys.stderr)
    print("after the block")
""")


def test_warnings_library_loggers_and_descriptor_writes_go_to_the_log_and_own_lines_to_the_terminal(tmp_path):
    log = tmp_path / "run.log"
    result = subprocess.run(
        [sys.executable, "-c", NOISY, str(log)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "the command's own line\nafter the block\n"
    assert result.stderr == "the command's own error\n"
    text = log.read_text()
    for noise in (
        "UserWarning: a library's UserWarning",
        "a library's notice",
        "a notice through logging's last resort",
        "a C++ write to fd 2",
        "a C++ write to fd 1",
    ):
        assert noise in text, noise
    assert "own" not in text


def test_a_captured_stream_keeps_the_own_lines_and_the_log_starts_fresh(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_text("an earlier run\n")
    with quiet.noise_to(log, own=quiet.PROJECT | {"tests"}) as sink:
        print("the command's own line")
        print("details, on purpose", file=sink)
    assert capsys.readouterr().out == "the command's own line\n"
    assert log.read_text() == "details, on purpose\n"
