"""deploy/docker/ngc-releases.toml: the NGC releases the images build from, and what each needs. .env's release,
the Triton image's torch pin and index, and the driver floor the docs state must agree with its row; both image
builds refuse a release that is not in it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from deploy.server import PROJECT_ROOT

DOCKER = PROJECT_ROOT / "deploy" / "docker"
SCRIPT = DOCKER / "ngc_release.py"
_spec = importlib.util.spec_from_file_location("ngc_release", SCRIPT)
ngc_release = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ngc_release)

RELEASE = re.search(r"^NGC_RELEASE=(\S+)$", (PROJECT_ROOT / ".env").read_text(), re.M).group(1)
# "driver release 580", "driver 580", "R580 driver", "driver branch R580": a driver floor the docs state.
DRIVER_FLOOR = re.compile(r"driver(?: release| branch)?(?: R| )(\d{3})\b|\bR(\d{3})(?: branch)? driver", re.I)


def torch_index() -> str:
    return re.search(r"^ARG TORCH_INDEX=(\S+)$", (DOCKER / "triton.Dockerfile").read_text(), re.M).group(1)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30)


def test_the_env_release_is_in_the_table_and_the_torch_pin_and_index_fit_it():
    row = ngc_release.check(RELEASE, DOCKER / "triton-requirements.txt", torch_index())
    assert row["torch_tag"] == "cu" + row["cuda"].replace(".", "")
    # Both images build from the release .env names.
    done = run(RELEASE, "--requirements", str(DOCKER / "triton-requirements.txt"), "--torch-index", torch_index())
    assert done.returncode == 0 and f"driver={row['driver']}" in done.stdout, done.stderr


def test_a_release_not_in_the_table_fails_with_one_line_naming_the_table():
    done = run("99.99")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "NGC_RELEASE 99.99" in line and "deploy/docker/ngc-releases.toml" in line and RELEASE in line, line


@pytest.mark.parametrize(
    "pin, index, says",
    [
        ("torch==2.9.0+cu128", None, "needs torch 2.9.x+cu130"),
        ("torch==2.8.0+cu130", None, "needs torch 2.9.x+cu130"),
        (None, "https://download.pytorch.org/whl/cu126", "does not serve +cu130"),
    ],
)
def test_a_torch_pin_or_index_for_another_cuda_fails_the_build(tmp_path, pin, index, says):
    args = [RELEASE]
    if pin:
        (tmp_path / "triton-requirements.txt").write_text(f"numpy==1.26.4\n{pin}\n")
        args += ["--requirements", str(tmp_path / "triton-requirements.txt")]
    if index:
        args += ["--torch-index", index]
    done = run(*args)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


def test_both_images_check_the_release_before_they_install_anything():
    for name in ("triton", "export"):
        text = (DOCKER / f"{name}.Dockerfile").read_text()
        after_from = text[text.index("\nFROM ") :]
        # An ARG before FROM is not seen by RUN: the check would get an empty release.
        assert re.search(r"^ARG NGC_RELEASE$", after_from, re.M), f"{name}.Dockerfile: ARG NGC_RELEASE after FROM"
        check = after_from.index('ngc_release.py "$NGC_RELEASE"')
        assert check < after_from.index("pip install"), f"{name}.Dockerfile installs before it checks the release"
        assert "deploy/docker/ngc-releases.toml" in after_from[:check]
    assert '--extra-index-url "$TORCH_INDEX"' in (DOCKER / "triton.Dockerfile").read_text()


def test_the_docs_state_the_driver_floor_of_the_release():
    floor = ngc_release.row(RELEASE)["driver"]
    stated = {}
    for doc in ("docs/production.md", "docs/gpu.md", "README.md", "deploy/k8s/README.md"):
        for match in DRIVER_FLOOR.finditer((PROJECT_ROOT / doc).read_text()):
            stated.setdefault(int(match.group(1) or match.group(2)), []).append(doc)
    assert floor in stated and "docs/production.md" in stated[floor], f"no doc states driver {floor}: {stated}"
    assert set(stated) == {floor}, f"the docs state other driver floors: {stated}"


def test_a_table_row_whose_torch_build_is_not_its_cuda_is_refused(tmp_path):
    table = tmp_path / "ngc-releases.toml"
    table.write_text(
        '[releases."26.01"]\ntriton = "2.65"\npytorch = "2.10"\ncuda = "13.1"\ndriver = 580\ntorch_tag = "cu130"\n'
    )
    with pytest.raises(ngc_release.ReleaseError, match="torch_tag cu130 is not CUDA 13.1's"):
        ngc_release.releases(table)
