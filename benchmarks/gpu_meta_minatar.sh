#!/usr/bin/env bash
# The meta-learner's GPU line (docs/meta.md): `podracer.meta` with 64 members on MinAtar
# Breakout at its own settings (PPO's minatar_anakin), for as many generations as
# META_SECONDS of wall time allow, then the saved objective against PPO on SEEDS held-out
# seeds: on Breakout, and on games the search never saw (benchmarks/meta.py --transfer).
#
#   bash benchmarks/gpu_meta_minatar.sh OUT_DIR
#   PYTHON=python3 (default python); POPULATION=4 INNER=65536 EVAL=65536 SEEDS=2 META_SECONDS=60 bash ...   # a CPU try
#
# OUT_DIR gets meta.log, meta.jsonl, learned_objective.{npz,json} and transfer.log. The
# search is stopped by SIGINT at META_SECONDS; a stopped podracer.meta saves the mean theta
# of its last whole generation as the objective.
set -uo pipefail
out=${1:?usage: gpu_meta_minatar.sh OUT_DIR}
mkdir -p "$out"
: "${META_SECONDS:=240}" "${POPULATION:=64}" "${INNER:=1015808}" "${EVAL:=1015808}"
: "${SEEDS:=16}" "${GAMES:=Breakout SpaceInvaders Asterix}"
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
meta=("${PYTHON:-python}" -m podracer.meta --config=agents/ppo/config.py:minatar_anakin
      --config.env.env_id=Breakout-MinAtar --workdir="$work"
      --config.meta.population="$POPULATION" --config.meta.inner_env_steps="$INNER"
      --config.meta.eval_every=5)
start=$SECONDS
timeout -s INT "$META_SECONDS" "${meta[@]}" --config.meta.generations=100000 2>&1 \
  | tee "$out/meta.log"
[[ -f "$work/learned_objective.npz" ]] \
  || { echo "gpu_meta_minatar: no generation finished in ${META_SECONDS} s" >&2; exit 1; }
echo "gpu_meta_minatar: $(wc -l <"$work/meta.jsonl") generations in $((SECONDS - start)) s" \
  | tee -a "$out/meta.log"
cp "$work"/meta.jsonl "$work"/learned_objective.npz "$work"/learned_objective.json "$out/"
tasks=""
for game in $GAMES; do
  tasks+="${tasks:+;}agents/ppo/config.py:minatar_anakin|--config.env.env_id=$game-MinAtar"
done
"${PYTHON:-python}" benchmarks/meta.py --transfer="$work/learned_objective.npz" --seeds="$SEEDS" \
  --eval_env_steps="$EVAL" --tasks="$tasks" 2>&1 | tee "$out/transfer.log"
