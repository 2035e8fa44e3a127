"""Meta-learns a policy objective in one Anakin program (the Podracer paper's case study):

  python -m podracer.meta --config=agents/ppo/config.py:cartpole_anakin --workdir=DIR \
      [--config.meta.inner_env_steps=65536 --config.meta.population=16 ...] \
      [--config.KEY=VALUE]

Its defaults (30 generations of 16 members, each member's fitness the mean of 2 trainings)
are the settings behind docs/results/meta.md's figures.

The objective is the `learned_policy` loss (podracer/components/losses/learned_policy.py):
PPO's surrogate minus a drift network's f_theta. An evolution strategy (evosax's OpenES,
antithetic) searches theta: each generation's `meta.population` members are full, short
PPO trainings (`meta.inner_env_steps` env steps each, the config's agent, environment
and settings), all of them in one compiled program (their environments, rollouts and
updates vmapped), and a member's fitness is its mean episode return over the last
`meta.fitness_fraction` of its training. The strategy's update runs on the host between
generations (one small jitted call: the generations' programs dominate).

DIR gets config.json, meta.jsonl (a record per generation: fitness best/mean/min of the
members, their episodes, inner env steps and env steps/s), meta_state.npz (the
strategy's state after the last generation: a relaunch into DIR resumes exactly) and
learned_objective.npz with learned_objective.json: the strategy's mean theta, which
`--config.loss=learned_policy --config.loss.path=DIR/learned_objective.npz` trains with
under Anakin, Sebulba or SEED. With `--config.meta.objective=dpo` the search is over
DPO's two constants instead (their log scales from the config's `loss.alpha` and
`loss.beta`, or the paper's 2 and 0.6): the records and learned_objective.json give the
`alpha` and `beta` found, to train with as `--config.loss=dpo --config.loss.alpha=...
--config.loss.beta=...`. With `--config.meta.lifetime=true` the drift also sees the
fraction of its training done (TA-LPO's lifetime conditioning; the loss's module
docstring). Bad input is one paragraph naming the key, exit 2. Ctrl-C or SIGTERM stops it
with exit 130 or 143, the state and the objective of the last whole generation saved.

The package, one concept a module: `config` (the `meta.*` keys, `meta.tasks`),
`strategy` (evosax's OpenES over theta), `trainings` (the members' programs), `search`
(the generations' loop, `train`), `files` (the workdir's state, records and objective)
and `cli` (`main`).
"""

from podracer.meta.cli import EXIT_CONFIG_ERROR, META_FLAG, main
from podracer.meta.config import OBJECTIVES, MetaConfig, load_task
from podracer.meta.files import (META_ADDED, OBJECTIVE_FILE, RECORDS_FILE, STATE_FILE,
                                 append_record, load_state, objective_about, save_objective,
                                 save_state, write_config)
from podracer.meta.search import train
from podracer.meta.strategy import (WIDE_KEYS, Strategy, initial_theta, search_std,
                                    worst_where_nonfinite)
from podracer.meta.trainings import (Tasks, check_generation, evaluation_program,
                                     generation_program, inner_config, member_program)

__all__ = [
    "EXIT_CONFIG_ERROR", "META_ADDED", "META_FLAG", "OBJECTIVES", "OBJECTIVE_FILE",
    "RECORDS_FILE", "STATE_FILE", "WIDE_KEYS", "MetaConfig", "Strategy", "Tasks",
    "append_record", "check_generation", "evaluation_program", "generation_program",
    "initial_theta", "inner_config", "load_state", "load_task", "main", "member_program",
    "objective_about", "save_objective", "save_state", "search_std", "train",
    "worst_where_nonfinite", "write_config",
]
