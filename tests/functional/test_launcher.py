"""The local server launcher: ready, clean stop (no stub, no /dev/shm region), clear start failures."""

import os
import signal
from pathlib import Path

import psutil
import pytest

from deploy.errors import ServerStartError
from deploy.server import LocalServer
from tests.conftest import server_config, start_serve_command


def _repository_with_digits(tmp_path: Path, repository: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "digits").symlink_to(repository / "digits", target_is_directory=True)
    return repo


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_start_ready_stop_leaves_nothing_behind(tmp_path, repository):
    # Pinned to one CPU (ServerConfig.cpus): the server, every thread of it and its stubs inherit it.
    cpu = max(os.sched_getaffinity(0))
    server = LocalServer(server_config(_repository_with_digits(tmp_path, repository), cpus={cpu}))
    server.start()
    try:
        stubs, regions = server.stub_pids(), server.shm_regions()
        assert server.running
        assert len(stubs) == 2, f"digits has two instances, found stub pids {stubs}"
        family = [psutil.Process(server.process.pid)] + [psutil.Process(pid) for pid in stubs]
        threads = [t.id for p in family for t in p.threads()]
        assert len(threads) > len(family) and all(os.sched_getaffinity(t) == {cpu} for t in threads)
        assert regions and all(r.startswith("/dev/shm/") and Path(r).exists() for r in regions)
    finally:
        left = server.stop()
    assert left == []
    assert all(_gone(pid) for pid in stubs)
    assert not [r for r in regions if Path(r).exists()]


def test_a_model_that_fails_to_load_stops_the_start_with_the_log(tmp_path):
    broken = tmp_path / "repo" / "broken"
    (broken / "1").mkdir(parents=True)  # no model.pt in the version folder
    (broken / "config.pbtxt").write_text(
        'name: "broken"\nplatform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        'input { name: "x" data_type: TYPE_FP32 dims: 4 }\noutput { name: "y" data_type: TYPE_FP32 dims: 4 }\n'
    )
    server = LocalServer(server_config(tmp_path / "repo"))
    with pytest.raises(ServerStartError) as info:
        server.start()
    message = str(info.value)
    assert "exited" in message  # it failed at once, not by running into the ready timeout
    assert "failed to load 'broken'" in message and "no TorchScript file" in message
    assert not server.running


def test_serve_command_stops_cleanly_on_sigterm(tmp_path, repository):
    repo = _repository_with_digits(tmp_path, repository)
    proc, lines, _ = start_serve_command(repo, "--exit-timeout", "10")
    try:
        stubs = [
            p.pid
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "triton_python_backend_stub" in " ".join(p.cmdline())
        ]
        assert stubs
        os.kill(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(lines) + output
    assert "no stub process or /dev/shm region left" in output
    assert all(_gone(pid) for pid in stubs)
