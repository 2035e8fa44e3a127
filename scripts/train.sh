#!/usr/bin/env bash
# Trains PPO on CartPole with the Anakin runtime, in the default lane's venv:
#
#   bash scripts/train.sh [--config.KEY=VALUE ...] [--workdir=DIR]
#
# Sets up .venv first if needed (scripts/setup_env.sh default). Extra arguments go to
# podracer.launch; a later --workdir overrides the default runs/cartpole_anakin.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup_env.sh default
exec .venv/bin/python -m podracer.launch \
  --config=agents/ppo/config.py:cartpole_anakin \
  --workdir=runs/cartpole_anakin \
  "$@"
