"""Loggers: where a run's records go, a component kind like environments and networks.

`log.loggers` names them (default `("jsonl", "tensorboard")`: metrics.jsonl and
TensorBoard event files); each one's keys come from the config's `log.<name>` section,
if it has one (`log.wandb.project=...`). Registered here: `jsonl`, `tensorboard`, `csv`
(one file, a column per metric) and `wandb` (Weights & Biases, offline unless
WANDB_MODE says otherwise; the `[wandb]` extra).

A logger is a registered class (or factory) with `write(record)` and `close()`:

    @registry.loggers.register("my_logger")
    class MyLogger(Logger):
      what = "my log"                      # names it when the disk fails
      def __init__(self, workdir: str, prefix: str = ""): ...
      def write(self, record): ...
      def close(self): ...

It is built once per run (in the run's process 0) with those of these arguments it
declares: `workdir` (where the run writes), `num_runs` (runs of one program; their
records carry `run`), `resumed` (the records a resumed run kept, which it has already
written once: write them again only if starting over) and `config` (the run's config as
a dict). What every logger gets alike is decided in one place, `metrics.MetricsLogger`:
records are strict JSON (NaN and infinities are None), each `write` and `close` runs
inside `podracer.logs.disk.writing` (a full or failing disk is one paragraph naming the
logger's `what` and `where`, and nothing more is written), and the progress line and
the plot are its own.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Sequence

from podracer import registry
from podracer.errors import ConfigError
from podracer.logs import CsvLogger, JsonlLogger, Logger, TensorBoardLogger
from podracer.logs.wandb import WandbLogger
from podracer.registry.build import build, check_kwargs


# The arguments a logger may declare, and the run's values of them (MetricsLogger's).
INJECTED = ("workdir", "num_runs", "resumed", "config")


def build_loggers(names: Sequence[str], options: Dict[str, Any],
                  **run: Any) -> Dict[str, Logger]:
  """{name: logger} for `log.loggers`, each from its `log.<name>` options and those of
  the run's values (`INJECTED`) its factory takes."""
  if isinstance(names, str) or not all(isinstance(n, str) for n in names):
    raise ConfigError(
        f"Config key `log.loggers` is a tuple of logger names, e.g. "
        f"--config.log.loggers='(\"jsonl\", \"tensorboard\", \"csv\")', got {names!r}; "
        f"registered loggers: {', '.join(registry.loggers.names())}.")
  built = {}
  for name in names:
    check_options(name, options.get(name, {}))
    factory = registry.loggers.get(name, key="log.loggers")
    declared = _parameters(factory)
    injected = {k: v for k, v in run.items() if k in declared}
    section = dict(options.get(name) or {}, name=name)
    built[name] = build(registry.loggers, section, key=f"log.{name}", **injected)
  return built


def check_options(name: str, options: Dict[str, Any]) -> None:
  """ConfigError naming the key, before anything is built, if `log.loggers` names no
  registered logger or `log.<name>` has keys its logger does not take."""
  factory = registry.loggers.get(name, key="log.loggers")
  injected = {k: None for k in INJECTED if k in _parameters(factory)}
  check_kwargs(factory, dict(options, **injected), what=f"logger '{name}'",
               key=f"log.{name}", injected=injected)


def _parameters(factory: Any) -> Sequence[str]:
  try:
    return tuple(inspect.signature(factory).parameters)
  except (TypeError, ValueError):
    return ()


registry.loggers.register("jsonl", JsonlLogger)
registry.loggers.register("tensorboard", TensorBoardLogger)
registry.loggers.register("csv", CsvLogger)
registry.loggers.register("wandb", WandbLogger)

__all__ = ["Logger", "JsonlLogger", "TensorBoardLogger", "CsvLogger", "WandbLogger",
           "build_loggers", "INJECTED"]
