"""Run a command here the way a container runs it: its own filesystem view, uid 1000, a read-only root.

``unshare -m`` gives the command a private mount namespace. Its root is a fresh tmpfs that holds only
what the image holds: the system's /usr and /etc read-only, the project's folders at /opt/tritonkit
read-only (the images' COPY), a /models volume, an empty /tmp and /dev/shm (the pods' emptyDirs), and
this checkout's virtual environment at its own path with its base interpreter. ``chroot`` enters it and
``setpriv`` drops to uid/gid 1000 with no supplementary groups and no new privileges, as the images'
``USER 1000:1000``, compose's ``no-new-privileges`` and the pods' ``runAsUser: 1000`` do.

Nothing on the host changes: the mounts exist only in the namespace and vanish with its last process,
and the base interpreter (under /root here, a folder uid 1000 cannot enter) is reached through a bind
mount in the new root, whose parent folders are the tmpfs's, not through new permissions on the host.
The test's temporary folders are the only trace, and pytest removes those.

The venv was installed editable (its .pth points at the checkout); inside, that .pth is replaced by one
line, ``/opt/tritonkit``, which is what the Triton image writes into its site-packages (tritonkit.pth).
Needs root, unshare, chroot and setpriv (util-linux, coreutils): CI runs as root.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from deploy.server import PROJECT_ROOT

UID = GID = 1000
VENV = Path(sys.prefix)
BASE_PREFIX = Path(sys.base_prefix)
SYSTEM_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib64", "lib32", "libx32")


def missing_tools() -> list[str]:
    """What this machine lacks to run a command under the containers' rules (empty: it can)."""
    missing = [tool for tool in ("unshare", "chroot", "setpriv") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (a mount namespace and uid 1000 need it; CI runs as root)")
    return missing


def editable_pth_files() -> list[Path]:
    """The venv's .pth files that put this checkout on sys.path (the editable install)."""
    site = next(p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_relative_to(VENV))
    return [
        p
        for p in sorted(site.glob("*.pth"))
        if "tritonkit" in p.name or str(PROJECT_ROOT) in p.read_text(errors="replace")
    ]


@dataclasses.dataclass
class Container:
    """One container's view of the filesystem and its process settings."""

    workdir: str
    """The image's WORKDIR / the pod's workingDir."""
    env: dict[str, str]
    """The whole environment (nothing is inherited, as in a container)."""
    scratch: Path
    """A host folder for the new root's mount point and the replaced .pth (pytest's tmp_path)."""
    binds: list[tuple[Path, str, bool]] = dataclasses.field(default_factory=list)
    """(host folder, path inside, read-only)."""
    tmpfs: tuple[str, ...] = ("/tmp", "/dev/shm")
    """Empty writable folders: the pods' emptyDirs, a container's own /tmp."""
    files: list[tuple[Path, str]] = dataclasses.field(default_factory=list)
    """(host file, path inside): copied in before the root turns read-only (a catalog for a test run)."""
    owned: tuple[str, ...] = ()
    """Folders inside (under a tmpfs) given to uid/gid 1000 once the binds are made: those a bind into an empty
    folder creates as root, where the command still writes."""

    def script(self, argv: list[str]) -> str:
        root = self.scratch / "root"
        root.mkdir(parents=True, exist_ok=True)
        pth = self.scratch / "tritonkit.pth"
        pth.write_text("/opt/tritonkit\n")
        q = shlex.quote
        inside = lambda path: q(f"{root}{path}")  # noqa: E731
        lines = ["set -e", f"mount -t tmpfs -o mode=755 tritonkit-root {q(str(root))}"]
        for name in SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                lines.append(f"ln -s {q(os.readlink(host))} {inside('/' + name)}")
            elif host.is_dir():
                lines.append(self._bind(host, f"/{name}", True, inside))
        for name in ("dev", "proc", "sys"):
            lines += [f"mkdir -p {inside('/' + name)}", f"mount --rbind /{name} {inside('/' + name)}"]
        # The empty folders first: a bind below one of them (a checkout under /tmp, as in a fresh clone there)
        # then lands on top of the tmpfs instead of being hidden by it.
        for path in self.tmpfs:
            lines += [f"mkdir -p {inside(path)}", f"mount -t tmpfs -o mode=1777 tmpfs {inside(path)}"]
        binds = [(VENV, str(VENV), True)] + self.binds
        if not BASE_PREFIX.is_relative_to("/usr"):
            binds.append((BASE_PREFIX, str(BASE_PREFIX), True))
        for source, target, read_only in sorted(binds, key=lambda b: b[1].count("/")):
            lines.append(self._bind(source, target, read_only, inside))
        for path in editable_pth_files():
            lines += [
                f"mount --bind {q(str(pth))} {inside(str(path))}",
                f"mount -o remount,bind,ro {inside(str(path))}",
            ]
        for source, target in self.files:
            lines += [f"cp {q(str(source))} {inside(target)}", f"chmod 0644 {inside(target)}"]
        lines += [f"mkdir -p {inside(path)} && chown {UID}:{GID} {inside(path)}" for path in self.owned]
        lines += [f"mkdir -p {inside(self.workdir)}", f"mount -o remount,ro {q(str(root))}"]
        env = [f"{k}={v}" for k, v in self.env.items()]
        lines.append(
            " ".join(
                [
                    "exec chroot",
                    q(str(root)),
                    "setpriv",
                    f"--reuid={UID}",
                    f"--regid={GID}",
                    "--clear-groups",
                    "--no-new-privs",
                    "env -i",
                    *map(q, env),
                    "sh -c",
                    q('cd "$0" && exec "$@"'),
                    q(self.workdir),
                    *map(q, argv),
                ]
            )
        )
        return "\n".join(lines)

    @staticmethod
    def _bind(source: Path, target: str, read_only: bool, inside) -> str:
        # A file (COPY of one file) needs a file to bind onto, a folder a folder.
        make = (
            f"mkdir -p {inside(str(Path(target).parent))} && touch {inside(target)}"
            if Path(source).is_file()
            else f"mkdir -p {inside(target)}"
        )
        mount = f"{make} && mount --rbind {shlex.quote(str(source))} {inside(target)}"
        return mount + (f" && mount -o remount,bind,ro {inside(target)}" if read_only else "")

    def popen(self, argv: list[str], log: Path) -> subprocess.Popen:
        """Start ``argv`` inside; its output goes to ``log``. Its own session, so :func:`stop` ends all of it."""
        with open(log, "wb") as out:
            return subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", self.script(argv)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def run(self, argv: list[str], log: Path, timeout_s: float) -> int:
        """Run ``argv`` to its end (``timeout_s`` bounds a hang: it is then killed and the test fails)."""
        proc = self.popen(argv, log)
        try:
            return proc.wait(timeout=timeout_s)
        finally:
            stop(proc, signal.SIGKILL, grace_s=10)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 60) -> list[str]:
    """Send ``sig`` to ``proc`` (a container's PID 1 would get it) and wait; then kill whatever of its
    processes is still there. Returns those that had not exited by themselves (empty: a clean stop)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        children = []
    left = []
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            left.append(f"{proc.pid} (still running {grace_s:.0f} s after signal {sig})")
            proc.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    for p in alive:
        try:
            left.append(f"{p.pid} {p.name()}")
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)
    return left
