#!/usr/bin/env bash
# Runs the test suite once per install lane, each in its own venv (scripts/setup_env.sh):
#
#   bash scripts/test.sh                      # both lanes, side by side: what CI runs
#                                             # (every test but the `extended` tier)
#   bash scripts/test.sh --all                # ... and the extended tier: more learning
#                                             # claims and long smoke runs (pytest.ini)
#   bash scripts/test.sh --extended           # the extended tier alone
#   bash scripts/test.sh --fast               # unit and contract tests only (no `learning`
#                                             # or `slow` marker): minutes, for iterating
#   LANES=default bash scripts/test.sh        # only the default lane
#   PARALLEL_LANES=0 bash scripts/test.sh     # one lane after the other (default on 1 core)
#   TEST_WORKERS=1 bash scripts/test.sh       # the default lane in one pytest process
#                                             # (default: 2 workers, pytest-xdist, on 2+ cores)
#   bash scripts/test.sh -k ppo -x            # extra arguments go to pytest
#   bash scripts/test.sh tests/components     # paths given replace the default `tests`
#
# Each lane runs `python -m pytest tests -q -ra` with PODRACER_LANE=<lane> exported; the
# reverb lane runs only the tests marked `reverb_lane` (what differs there: Reverb, code
# whose behaviour depends on that lane's JAX and libraries, the launcher there; see
# tests/conftest.py). Both lanes run even if the first fails; the exit status is non-zero
# if any lane failed (a lane whose pytest ran no test counts as failed).
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

# The tiers: by default (and in CI) every test but the `extended` ones; --all every test;
# --extended those alone; --fast the unit and contract tests (no `learning` or `slow`).
# A `-m` given after them replaces the tier's.
TIER=(-m "not extended")
TIER_GIVEN=0
ARGS=()
for arg in "$@"; do
  case "$arg" in
    --fast) TIER=(-m "not learning and not slow and not extended"); TIER_GIVEN=1 ;;
    --all) TIER=(); TIER_GIVEN=1 ;;
    --extended) TIER=(-m extended); TIER_GIVEN=1 ;;
    *) ARGS+=("$arg") ;;
  esac
done

# Default target is `tests`, unless the arguments already name paths or node ids: those
# run whatever their tier, unless a tier flag was given.
TARGETS=(tests)
for arg in "${ARGS[@]+"${ARGS[@]}"}"; do
  if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
    TARGETS=()
    [[ $TIER_GIVEN == 0 ]] && TIER=()
    break
  fi
done
set -- "${TIER[@]+"${TIER[@]}"}" "${ARGS[@]+"${ARGS[@]}"}"

CORES="$(nproc 2>/dev/null || echo 1)"
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/podracer-test.XXXXXX")"
trap 'rm -rf "$LOG_DIR"' EXIT

declare -A RESULT SUMMARY TIMES PRESETUP
STATUS=0
TOTAL_PASSED=0 TOTAL_FAILED=0 TOTAL_SKIPPED=0

count() {  # count WORD LINE: the number before WORD in a pytest summary line (0 if absent).
  local n
  n="$(grep -oE "[0-9]+ $1" <<<"$2" | head -n 1 | cut -d' ' -f1)"
  echo "${n:-0}"
}

# run_lane LANE: sets the lane up and runs its tests; the whole output goes to stdout and
# the pytest part to $LOG_DIR/LANE.log; "setup_ok rc setup_s test_s" to $LOG_DIR/LANE.status.
run_lane() {
  local lane="$1" venv=".venv" t0 t1 setup_s rc
  [[ "$lane" == reverb ]] && venv=".venv-reverb"
  echo
  echo "================================ lane: $lane ($venv) ================================"
  t0=$SECONDS
  if [[ -n "${PRESETUP[$lane]:-}" ]]; then
    # Installed in the background while an earlier lane ran; the call below then only
    # checks its lock hash (or, if that install failed, tries again and says why).
    wait "${PRESETUP[$lane]}" || true
    cat "$LOG_DIR/$lane.presetup"
  fi
  if bash scripts/setup_env.sh "$lane"; then
    setup_s=$((SECONDS - t0))
    # The default lane's tests in 2 worker processes (pytest-xdist), a file each at a time
    # (much of a test is one core's work: imports, compiles, a launcher's start, waits),
    # the heaviest files first (tests/conftest.py orders them).
    local workers=()
    if [[ "$lane" == default && "${TEST_WORKERS:-$([[ $CORES -ge 2 ]] && echo 2 || echo 1)}" -gt 1 ]]; then
      workers=(-n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
    fi
    echo "---- $lane: setup took ${setup_s}s; running: python -m pytest ${TARGETS[*]:+${TARGETS[*]} }-q -ra ${workers[*]} ${*:2}"
    t1=$SECONDS
    PODRACER_LANE="$lane" "$venv/bin/python" -m pytest "${TARGETS[@]}" -q -ra --durations=50 "${workers[@]+"${workers[@]}"}" "${@:2}" 2>&1 \
      | tee "$LOG_DIR/$lane.log"
    rc=${PIPESTATUS[0]}
    echo "1 $rc $setup_s $((SECONDS - t1))" > "$LOG_DIR/$lane.status"
  else
    rc=$?
    echo "0 $rc $((SECONDS - t0)) 0" > "$LOG_DIR/$lane.status"
  fi
}

# With 2 cores or more the lanes run side by side: much of each lane is one core's work
# (imports, compiles, launcher processes, waits): on 2 cores both lanes took 52.5 min,
# against 61.4 one after the other (2026-11-26). Each line shows as it comes, prefixed with its lane;
# each lane's whole output follows when both are done. Tests that look for their own
# stray processes know them by the session's tag (tests/conftest.py).
if [[ ${#LANE_LIST[@]} -gt 1 && "${PARALLEL_LANES:-$([[ $CORES -ge 2 ]] && echo 1 || echo 0)}" == 1 ]]; then
  echo "test.sh: $CORES cores: running the lanes ${LANE_LIST[*]} side by side"
  # Both at the same priority: a reverb lane reniced to 5 (tried 2026-11-28) failed 3
  # of its slow tests in a full run, where it passes at equal priority; many of them are
  # timed (a stop within 10 s, a relaunch's start).
  for lane in "${LANE_LIST[@]}"; do
    run_lane "$lane" "$@" 2>&1 | tee "$LOG_DIR/$lane.out" | sed -u "s/^/[$lane] /" &
  done
  wait
  for lane in "${LANE_LIST[@]}"; do cat "$LOG_DIR/$lane.out"; done
else
  # The later lanes' installs (mostly downloads) run beside the first lane's install.
  for lane in "${LANE_LIST[@]:1}"; do
    bash scripts/setup_env.sh "$lane" > "$LOG_DIR/$lane.presetup" 2>&1 &
    PRESETUP[$lane]=$!
  done
  for lane in "${LANE_LIST[@]}"; do run_lane "$lane" "$@"; done
fi

for lane in "${LANE_LIST[@]}"; do
  read -r setup_ok rc setup_s test_s < "$LOG_DIR/$lane.status" || { setup_ok=0; rc=1; setup_s=0; test_s=0; }
  if [[ "$setup_ok" == 1 ]]; then
    log="$LOG_DIR/$lane.log"
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
    RESULT[$lane]="FAIL (setup_env.sh exit status $rc)"
    SUMMARY[$lane]="tests not run"
    TIMES[$lane]="setup ${setup_s}s"
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
