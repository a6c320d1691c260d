"""``runner.end_stragglers``: what is left of a tool's process group once its leader exited, with real processes."""

import subprocess
import time

from loadtest.generators.locust import runner


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"  # a zombie waits for init to reap it: gone
    except FileNotFoundError:
        return False


def test_a_child_left_running_after_its_group_leader_exited_is_killed():
    # The leader starts a child in its group and exits at once, as Locust's parent does around a hung worker.
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    child = int(leader.stdout.readline())
    assert leader.wait(timeout=10) == 0 and _alive(child)
    started = time.monotonic()
    runner.end_stragglers(leader.pid, grace_s=0.2)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    assert time.monotonic() - started < 5


def test_a_group_that_ended_by_itself_is_left_as_it_is():
    leader = subprocess.Popen(["sh", "-c", "exit 0"], start_new_session=True)
    assert leader.wait(timeout=10) == 0
    started = time.monotonic()
    runner.end_stragglers(leader.pid, grace_s=5)  # nothing left: returns at once, without waiting out the grace
    assert time.monotonic() - started < 1
