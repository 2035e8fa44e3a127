#!/usr/bin/env bash
# Runs the test suite once per install lane, each in its own venv (scripts/setup_env.sh):
#
#   bash scripts/test.sh                      # both lanes: default, then reverb
#   LANES=default bash scripts/test.sh        # only the default lane
#   bash scripts/test.sh -k ppo -x            # extra arguments go to pytest
#   bash scripts/test.sh tests/components     # paths given replace the default `tests`
#
# Each lane runs `python -m pytest tests -q -ra` with PODRACER_LANE=<lane> exported. Both
# lanes run even if the first fails; the exit status is non-zero if any lane failed
# (a lane whose pytest ran no test counts as failed).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

read -r -a LANE_LIST <<<"${LANES:-default reverb}"
[[ ${#LANE_LIST[@]} -gt 0 ]] || { echo "test.sh: LANES is empty" >&2; exit 2; }
for lane in "${LANE_LIST[@]}"; do
  case "$lane" in
    default | reverb) ;;
    *) echo "test.sh: unknown lane '$lane' in LANES (expected: default, reverb)" >&2; exit 2 ;;
  esac
done

# Default target is `tests`, unless the arguments already name paths or node ids.
TARGETS=(tests)
for arg in "$@"; do
  if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then TARGETS=(); break; fi
done

LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/podracer-test.XXXXXX")"
trap 'rm -rf "$LOG_DIR"' EXIT

declare -A RESULT SUMMARY TIMES
STATUS=0
TOTAL_PASSED=0 TOTAL_FAILED=0 TOTAL_SKIPPED=0

count() {  # count WORD LINE: the number before WORD in a pytest summary line (0 if absent).
  local n
  n="$(grep -oE "[0-9]+ $1" <<<"$2" | head -n 1 | cut -d' ' -f1)"
  echo "${n:-0}"
}

for lane in "${LANE_LIST[@]}"; do
  venv=".venv"; [[ "$lane" == reverb ]] && venv=".venv-reverb"
  echo
  echo "================================ lane: $lane ($venv) ================================"

  t0=$SECONDS
  if bash scripts/setup_env.sh "$lane"; then
    setup_s=$((SECONDS - t0))
    echo "---- $lane: setup took ${setup_s}s; running: python -m pytest ${TARGETS[*]:+${TARGETS[*]} }-q -ra $*"
    t1=$SECONDS
    log="$LOG_DIR/$lane.log"
    PODRACER_LANE="$lane" "$venv/bin/python" -m pytest "${TARGETS[@]}" -q -ra --durations=25 "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    test_s=$((SECONDS - t1))
    line="$(grep -E '([0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)|no tests ran)' "$log" \
            | grep -E ' in [0-9.]+s' | tail -n 1 | sed -E 's/^=+ //; s/ =+$//')"
    SUMMARY[$lane]="${line:-no pytest summary line (exit status $rc)}"
    TIMES[$lane]="setup ${setup_s}s, tests ${test_s}s"
    TOTAL_PASSED=$((TOTAL_PASSED + $(count passed "$line")))
    TOTAL_FAILED=$((TOTAL_FAILED + $(count failed "$line") + $(count error "$line")))
    TOTAL_SKIPPED=$((TOTAL_SKIPPED + $(count skipped "$line")))
    case "$rc" in
      0) RESULT[$lane]="PASS" ;;
      5) RESULT[$lane]="FAIL (no tests ran)"; STATUS=1 ;;
      *) RESULT[$lane]="FAIL (pytest exit status $rc)"; STATUS=1 ;;
    esac
  else
    rc=$?
    RESULT[$lane]="FAIL (setup_env.sh exit status $rc)"
    SUMMARY[$lane]="tests not run"
    TIMES[$lane]="setup $((SECONDS - t0))s"
    STATUS=1
  fi
done

echo
echo "================================ results by lane ================================"
for lane in "${LANE_LIST[@]}"; do
  printf '%-8s %s: %s  [%s]\n' "$lane" "${RESULT[$lane]}" "${SUMMARY[$lane]}" "${TIMES[$lane]}"
done
echo "total: $TOTAL_PASSED passed, $TOTAL_FAILED failed, $TOTAL_SKIPPED skipped"
exit "$STATUS"
