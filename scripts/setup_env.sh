#!/usr/bin/env bash
# Creates or updates the virtual environment of one install lane, from its lock file:
#
#   bash scripts/setup_env.sh default   # .venv:        Python >= 3.11, current JAX
#   bash scripts/setup_env.sh reverb    # .venv-reverb: Python 3.11, dm-reverb + JAX 0.4.34
#
# It installs `pip install -c requirements/LANE.txt -e ".[EXTRAS]"` (default: test,jax-envs,wandb,meta,suites,video,flax,equinox;
# reverb: reverb,test) and records a hash of the
# lock file (and of setup.py and the package version) in the venv; while that hash matches,
# a later call does nothing. PODRACER_PYTHON=/path/to/python picks the interpreter for a new
# venv. Prints one line saying what it did (pip's output goes to VENV/setup_env.log).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LANE="${1:-default}"
case "$LANE" in
  default) VENV=".venv"; LOCK="requirements/default.txt"; EXTRAS="test,jax-envs,wandb,meta,suites,video,flax,equinox" ;;
  reverb) VENV=".venv-reverb"; LOCK="requirements/reverb.txt"; EXTRAS="reverb,test" ;;
  *) echo "setup_env: unknown lane '$LANE' (expected: default or reverb)" >&2; exit 2 ;;
esac
STAMP="$VENV/.podracer-lock.sha256"
LOG="$VENV/setup_env.log"
START=$SECONDS
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

say() { echo "setup_env: $LANE lane: $*"; }
die() { echo "setup_env: $LANE lane: $*" >&2; exit 1; }

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum | cut -d' ' -f1
  else shasum -a 256 | cut -d' ' -f1; fi
}

[[ -f "$LOCK" ]] || die "lock file $LOCK is missing"
WANT_HASH="$(
  {
    echo "lane=$LANE extras=$EXTRAS"
    cat "$LOCK" setup.py
    grep -E '^__version__' podracer/__init__.py || true
  } | sha256)"

# Python major.minor of an interpreter, or nothing when it does not run.
py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true; }
version_ok() {  # version_ok X.Y: is X.Y acceptable for this lane?
  local v="$1"
  [[ -n "$v" ]] || return 1
  if [[ "$LANE" == reverb ]]; then [[ "$v" == 3.11 ]]
  else [[ "${v%%.*}" -gt 3 || ( "${v%%.*}" -eq 3 && "${v#*.}" -ge 11 ) ]]; fi
}

# Open MPI's mpirun, for runs a cluster launcher starts (docs/runs.md; tests/test_multihost.py
# skips its test, saying why, where it cannot be had): Debian's openmpi-bin, where apt
# works without asking (root, or passwordless sudo). The default lane's alone.
install_mpirun() {
  command -v mpirun >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || { say "note: no apt-get here, so no mpirun"; return 0; }
  local sudo=""
  if [[ $(id -u) != 0 ]]; then
    sudo -n true 2>/dev/null || { say "note: apt-get needs root here, so no mpirun"; return 0; }
    sudo="sudo -n"
  fi
  if { $sudo apt-get install -y -q --no-install-recommends openmpi-bin ||
       { $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends openmpi-bin; }
     } >>"${TMPDIR:-/tmp}/podracer-openmpi.log" 2>&1; then
    say "installed Open MPI's mpirun ($(mpirun --version 2>/dev/null | head -n 1))"
  else
    say "note: apt-get could not install openmpi-bin (${TMPDIR:-/tmp}/podracer-openmpi.log)"
  fi
}
if [[ "$LANE" == default ]]; then install_mpirun; fi

# Fast path: the venv exists, runs, and was installed from this very lock.
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_HASH" ]] && version_ok "$(py_version "$VENV/bin/python")"; then
  say "up to date ($VENV, Python $(py_version "$VENV/bin/python"), ${LOCK})"
  exit 0
fi

# One setup at a time per venv (two test runs may start together).
if command -v flock >/dev/null 2>&1; then
  exec 9>"${TMPDIR:-/tmp}/podracer-setup-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)-$LANE.lock"
  flock 9
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_HASH" ]]; then
    say "up to date ($VENV, set up by a concurrent run)"
    exit 0
  fi
fi

choose_python() {
  local cand
  if [[ -n "${PODRACER_PYTHON:-}" ]]; then
    version_ok "$(py_version "$PODRACER_PYTHON")" || die "PODRACER_PYTHON=$PODRACER_PYTHON is not a usable Python for this lane"
    echo "$PODRACER_PYTHON"; return
  fi
  for cand in python3.11 python3; do
    if [[ "$LANE" == reverb && "$cand" != python3.11 ]]; then continue; fi
    if version_ok "$(py_version "$cand")"; then
      "$cand" -c 'import sys; print(sys.executable)'; return
    fi
  done
  if [[ "$LANE" == reverb ]]; then
    cat >&2 <<'EOF'
setup_env: reverb lane: needs CPython 3.11 as `python3.11` (dm-reverb 0.14 has wheels for 3.11 only).
  Get it with one of:
    apt-get install python3.11 python3.11-venv      (Debian 12 / Ubuntu 22.04+)
    pyenv install 3.11 && pyenv global 3.11         (or add 3.11 to your pyenv global list)
    uv python install 3.11                          (then put its python3.11 on PATH)
  or point PODRACER_PYTHON at a Python 3.11 interpreter.
EOF
  else
    echo "setup_env: default lane: needs Python >= 3.11 as python3.11 or python3 (or set PODRACER_PYTHON)." >&2
  fi
  exit 1
}

HAVE="$(py_version "$VENV/bin/python")"
if [[ -d "$VENV" ]] && version_ok "$HAVE"; then
  ACTION="updated $VENV (Python $HAVE)"
else
  PY="$(choose_python)"
  if [[ -e "$VENV" ]]; then
    ACTION="recreated $VENV (Python $(py_version "$PY"); the old one ran '${HAVE:-nothing}')"
    "$PY" -m venv --clear "$VENV"
  else
    ACTION="created $VENV (Python $(py_version "$PY"))"
    "$PY" -m venv "$VENV"
  fi
fi

rm -f "$STAMP"
{
  echo "== $(date -u +%FT%TZ) setup_env.sh $LANE: pip install -c $LOCK -e .[$EXTRAS]"
  "$VENV/bin/python" -m pip install -q --upgrade pip &&
  "$VENV/bin/python" -m pip install -q -c "$LOCK" -e ".[$EXTRAS]"
} >"$LOG" 2>&1 || {
  tail -n 40 "$LOG" >&2
  die "pip install failed (full log: $ROOT/$LOG)"
}

# Anything installed that the lock does not pin means the lock is stale: say so.
"$VENV/bin/python" - "$LOCK" <<'EOF' || true
import importlib.metadata as md, re, sys
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
locked = set()
for line in open(sys.argv[1]):
  line = line.split("#", 1)[0].strip()
  if "==" in line:
    locked.add(norm(line.split("==", 1)[0]))
extra = sorted({f"{d.metadata['Name']}=={d.version}" for d in md.distributions()
                if norm(d.metadata["Name"]) not in locked | {"pip", "setuptools", "wheel", "podracer"}})
if extra:
  print(f"setup_env: note: installed but not pinned in {sys.argv[1]} (regenerate the lock?): "
        + ", ".join(extra), file=sys.stderr)
EOF

echo "$WANT_HASH" >"$STAMP"
say "$ACTION from $LOCK in $((SECONDS - START))s"
