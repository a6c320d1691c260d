#!/usr/bin/env bash
# The GPU check in one command: offline install of what this host lacks, then the check itself.
#
#   bash tritonkit/gpu/check.sh OUT_DIR              on a Linux host with one NVIDIA GPU (CUDA torch installed)
#   bash tritonkit/gpu/check.sh --dry-run OUT_DIR    on any machine: every step that needs no CUDA
#   options: --models digits,minilm (a subset)   --no-generation (leave the generation step out)
#            --keep (keep the temporary repository and server log)
#
# Wheels come from tritonkit/gpu/wheels/ (or $TRITONKIT_WHEELS): see tritonkit/gpu/README.md for the list.
# The interpreter is $PYTHON, else this checkout's .venv/bin/python, else python3.
# Exit status: 0 every step passed (targets are figures, reported met/missed), 1 a step failed,
# 2 bad arguments or a wheel that is neither installed nor brought.
set -euo pipefail

usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

dry_run=0
out=""
extra=()
select=()  # what the run checks, which decides the wheels it needs
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    --models) shift; [ $# -gt 0 ] || { echo "check.sh: --models needs NAME[,NAME...]" >&2; exit 2; }
              IFS=, read -r -a names <<< "$1"; extra+=(--models "${names[@]}"); select+=(--models "${names[@]}") ;;
    --no-generation) extra+=(--no-generation); select+=(--no-generation) ;;
    --keep) extra+=(--keep) ;;
    -*) echo "check.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) if [ -n "$out" ]; then echo "check.sh: one OUT_DIR only (got $out and $1)" >&2; exit 2; fi; out="$1" ;;
  esac
  shift
done
if [ -z "$out" ]; then echo "check.sh: OUT_DIR is missing" >&2; usage >&2; exit 2; fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
wheels="${TRITONKIT_WHEELS:-$here/wheels}"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"
echo "== check.sh: python $PYTHON, wheels $wheels, results $out$([ $dry_run = 1 ] && echo ', dry run')"

# 1. What this interpreter lacks, installed from the brought wheels only: no index, no dependency resolution.
set +e
missing="$("$PYTHON" -m tritonkit.gpu.wheels missing --wheels "$wheels" ${select[@]+"${select[@]}"})"
plan_rc=$?
set -e
"$PYTHON" -m tritonkit.gpu.wheels plan --wheels "$wheels" ${select[@]+"${select[@]}"}
if [ -z "$missing" ]; then
  echo "wheels: nothing to install"
else
  if [ $dry_run = 1 ]; then
    echo "dry run: would run: $PYTHON -m pip install --no-index --no-deps --find-links $wheels $(echo $missing)"
  elif [ $plan_rc -ne 0 ]; then
    echo "check.sh: bring the wheels listed above as 'no wheel' into $wheels (tritonkit/gpu/README.md)" >&2
    exit 2
  else
    # shellcheck disable=SC2086
    "$PYTHON" -m pip install --no-index --no-deps --find-links "$wheels" $missing
  fi
fi

# The Python-backend stubs import this checkout's packages (backends/) and ignore PYTHONPATH; where the
# checkout is not installed in this interpreter (pip install -e .), a .pth file in its site-packages names it.
if ! (cd / && "$PYTHON" -c "import backends, tritonkit" 2>/dev/null); then
  pth="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tritonkit-checkout.pth"
  if [ $dry_run = 1 ]; then
    echo "dry run: would write $pth naming $root (the stubs import backends/ from it)"
  else
    echo "$root" > "$pth"
    echo "checkout: wrote $pth naming $root (the stubs import backends/ from it)"
  fi
fi

# 2-11. The check itself; it writes results.md and results.json into OUT_DIR.
args=("$out" --wheels "$wheels" ${extra[@]+"${extra[@]}"})
[ $dry_run = 1 ] && args+=(--dry-run)
exec "$PYTHON" -m tritonkit.gpu.check "${args[@]}"
