"""podracer.meta's settings: the `meta.*` keys (`MetaConfig`) and `meta.tasks`' configs
(`load_task`), each refused with one paragraph naming the key."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Dict, List

from podracer.errors import ConfigError

# What `meta.objective` searches: the learned_policy loss's drift network and clip scale,
# or DPO's two constants (their log scales), DPO as a low-dimensional target.
OBJECTIVES = ("drift", "dpo")


@dataclasses.dataclass(frozen=True)
class MetaConfig:
  """The `meta.*` keys."""
  generations: int = 30           # (20 before 0.22.0)
  population: int = 16            # ES members a generation (even: antithetic pairs)
  sigma: float = 0.01             # the search distribution's std over the drift's weights
                                  # (0.1 before 0.20.0: their noise drowned c_v's signal)
  sigma_clip: float = 1.0         # ... over c and c_v, the learned log clip scales (wide:
                                  # their gain lies most of a unit away, docs/meta.md)
  learning_rate: float = 0.05     # of Adam on the strategy's mean
  hidden: int = 16                # the drift network's hidden units
  inner_env_steps: int = 0        # each member's training; 0: the config's total_env_steps
  fitness_fraction: float = 0.2   # a member's fitness: its mean return over this last part
  member_seeds: int = 2           # trainings per member (their mean is its fitness; 1
                                  # before 0.22.0)
  eval_every: int = 5             # generations between evaluations of the mean theta
                                  # (`mean_theta_fitness`, on held-out seeds); 0: none
  seed: int = 0
  objective: str = "drift"        # "drift" (learned_policy) or "dpo" (log alpha, log beta)
  drift_form: str = "first_order"  # the learned_policy drift's form: or "squared" (0.18)
  tasks: str = ""                 # more tasks each member trains on, ";"-separated configs
                                  # (each "path.py:NAME|--config.KEY=VALUE|..."): each
                                  # task's fitness divided by the start's (PPO's) there
  value_clip: bool = True         # theta scales the value loss's clip range too (c_v)
  lifetime: bool = False          # the drift also sees the fraction of training done
                                  # (TA-LPO's lifetime conditioning)
  steps_in_std: bool = True       # Adam's step on each parameter scaled by its std over
                                  # the widest (sigma / sigma_clip): a narrow drift weight
                                  # moves at its own width, not the clip scales' (before
                                  # 0.21.0 every coordinate stepped learning_rate)

  def task_list(self) -> List[str]:
    return [t.strip() for t in self.tasks.split(";") if t.strip()]

  @classmethod
  def from_args(cls, args: Dict[str, str]) -> "MetaConfig":
    """From `--config.meta.KEY=VALUE` flags, each parsed as its default's type."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, text in args.items():
      if key not in fields:
        raise ConfigError(f"Config key `meta.{key}` is not a meta key; they are: "
                          f"{', '.join(fields)}.")
      kind = type(fields[key].default)
      try:
        values[key] = (_boolean(text) if kind is bool else kind(float(text))
                       if kind is int and "e" in text.lower() else kind(text))
      except ValueError:
        raise ConfigError(f"Config key `meta.{key}` is {text!r}, not {kind.__name__}.") from None
    return cls(**values).checked()

  def checked(self) -> "MetaConfig":
    positive = dict(generations=self.generations, population=self.population,
                    sigma=self.sigma, sigma_clip=self.sigma_clip,
                    learning_rate=self.learning_rate, hidden=self.hidden,
                    member_seeds=self.member_seeds)
    for key, value in positive.items():
      if not value > 0:
        raise ConfigError(f"Config key `meta.{key}` is {value}; it must be positive.")
    if self.population % 2:
      raise ConfigError(f"Config key `meta.population` is {self.population}; antithetic "
                        "sampling needs an even number of members.")
    if not 0 < self.fitness_fraction <= 1:
      raise ConfigError(f"Config key `meta.fitness_fraction` is {self.fitness_fraction}; it "
                        "is the last part of a member's training its fitness averages, in "
                        "(0, 1].")
    if self.inner_env_steps < 0:
      raise ConfigError("Config key `meta.inner_env_steps` is negative.")
    if self.eval_every < 0:
      raise ConfigError("Config key `meta.eval_every` is negative (0: no evaluation).")
    from podracer.components.losses.learned_policy import DRIFT_FORMS  # pylint: disable=import-outside-toplevel
    if self.drift_form not in DRIFT_FORMS:
      raise ConfigError(f"Config key `meta.drift_form` is {self.drift_form!r}; it is one "
                        f"of {', '.join(DRIFT_FORMS)} (the learned_policy loss's drift).")
    if self.objective not in OBJECTIVES:
      raise ConfigError(f"Config key `meta.objective` is {self.objective!r}; it is one of "
                        f"{', '.join(OBJECTIVES)} (the learned drift network, or DPO's "
                        "alpha and beta).")
    if self.lifetime and self.objective == "dpo":
      raise ConfigError("Config key `meta.lifetime` conditions the learned drift network on "
                        "the training's progress; `meta.objective` is dpo, whose two "
                        "constants have none: set one or the other.")
    return self


def _boolean(text: str) -> bool:
  if text.strip().lower() not in ("true", "false", "1", "0"):
    raise ValueError(text)
  return text.strip().lower() in ("true", "1")


def load_task(text: str) -> Any:
  """One task of `meta.tasks`: a config file's flag value and its overrides, joined by
  "|" ("agents/ppo/config.py:catch_anakin|--config.env=gymnax|--config.env.env_id=..."),
  loaded as the launcher loads them (a section swap, then the key overrides)."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  from podracer.config import compose, files  # pylint: disable=import-outside-toplevel
  path, *overrides = [part.strip() for part in text.split("|")]
  bad = [o for o in overrides if not (o.startswith("--config.") and "=" in o)]
  if bad:
    raise ConfigError(f"Config key `meta.tasks`: in {text!r}, {bad[0]!r} is not a "
                      "--config.KEY=VALUE override (a task is a config and its overrides, "
                      "joined by \"|\").")
  try:
    config = files.load(path)
  except ConfigError as e:
    raise ConfigError(f"Config key `meta.tasks`: the task {text!r}: {e}") from None
  choices, rest = compose.section_choices(overrides)
  with config.unlocked():
    compose.choose(config, choices)
    compose.add_accepted(config, [compose.override_path(o) for o in rest])
  values = flags.FlagValues()
  # config_flags finds the overrides to define in sys.argv, when the flag is defined.
  saved, sys.argv = sys.argv, ["podracer.meta", *rest]
  try:
    flag = config_flags.DEFINE_config_dict("config", config, "A task.", flag_values=values)
    values(sys.argv)
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
    raise ConfigError(f"Config key `meta.tasks`: could not apply {' '.join(rest)} to the "
                      f"task {path!r}: {' '.join(str(e).split())}") from None
  finally:
    sys.argv = saved
  return flag.value
