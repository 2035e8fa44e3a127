"""The learning-curve plot of a run's records (`learning_curve.png`): mean episode return
and `eval_return` over env steps above steps/s; many runs thin with each group's mean and
spread; under PBT a panel per hyperparameter with each member's schedule. matplotlib is
imported when a run starts recording (`import_in_background`) or when a plot is drawn,
not before; the figure is matplotlib's `Figure` itself, so drawing one never changes the
backend of a user's own pyplot."""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

from podracer.logs import runs as runs_lib


_importing: List[threading.Thread] = []


def import_in_background() -> None:
  """Starts importing matplotlib's figure and its PNG writer in a daemon thread, once a
  process: a run that plots at its end (about 0.5 to 1 s of imports) then imports while
  XLA trains, which holds no Python lock, rather than after its last record. An import
  that fails there fails again, with its message, where the plot is drawn."""
  if not _importing:
    _importing.append(threading.Thread(target=_import_matplotlib, daemon=True,
                                       name="podracer-import-matplotlib"))
    _importing[0].start()


def _import_matplotlib() -> None:
  try:
    import matplotlib.backends.backend_agg  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    import matplotlib.figure  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except Exception:  # pylint: disable=broad-except
    pass  # Said where the plot is drawn.


def plot_learning_curve(records: List[Dict[str, Any]], path: str, title: str = "",
                        runs: Optional[Any] = None) -> str:
  """Mean episode return (and `eval_return`) against env steps over steps/s; with many
  runs (`runs`), every run thin and each group's mean with its spread over seeds."""
  from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

  # Population-based training: a panel per hyperparameter, each member's schedule.
  keys = list(runs.swept) if runs and any("parent" in r for r in records) else []
  fig = Figure(figsize=(7, 6 + 2 * len(keys)), layout="constrained" if keys else None)
  axes = fig.subplots(2 + len(keys), 1, sharex=True,
                      gridspec_kw=dict(height_ratios=[3, 1] + [2] * len(keys)))
  ax_ret, ax_sps = axes[0], axes[1]
  if keys:
    _plot_population(fig, axes[2:], records, keys)
  if runs:
    _plot_runs(ax_ret, records, runs)
    # Steps/s of all runs together, one point per call.
    records = [dict(r, sps=r["sps"] * runs.num_runs) for r in records
               if r["run"] == 0 and "sps" in r]
  points = [(r["env_steps"], r["episode_return"]) for r in records
            if r.get("episode_return") is not None]
  if points and not runs:
    ax_ret.plot(*zip(*points), marker=".", lw=1.2, label="training (acting policy)")
  evaluated = [(r["env_steps"], r["eval_return"]) for r in records
               if r.get("eval_return") is not None]
  if evaluated and not runs:
    ax_ret.plot(*zip(*evaluated), marker="o", lw=1.2, color="tab:orange",
                label="evaluation (eval_return)")
    ax_ret.legend(loc="best")
  ax_ret.set_ylabel("mean episode return")
  ax_ret.set_title(title or "learning curve")
  ax_ret.grid(alpha=0.3)
  sps = [(r["env_steps"], r["sps"]) for r in records
         if "sps" in r and not r.get("includes_compilation")]
  if sps:
    ax_sps.plot(*zip(*sps), color="tab:gray", lw=1.0)
  ax_sps.set_ylabel("env steps/s")
  axes[-1].set_xlabel("env steps")
  ax_sps.grid(alpha=0.3)
  if not keys:  # (the population's colour bar takes the constrained layout)
    fig.tight_layout()
  fig.savefig(path, dpi=100)
  return path


def _plot_runs(ax: Any, records: List[Dict[str, Any]], runs: Any) -> None:
  """Each run a thin line; each group (all runs, or one per swept value) its mean, bold,
  over a band from its runs' min to max."""
  lines, bands = runs_lib.curves(records, runs)
  for xs, ys in lines:
    ax.plot(xs, ys, lw=0.5, alpha=0.35, color="tab:gray")
  for i, (label, xs, mean, low, high) in enumerate(bands):
    color = f"C{i % 10}"
    ax.fill_between(xs, low, high, color=color, alpha=0.2)
    ax.plot(xs, mean, lw=2.0, color=color, label=f"{label} (mean, band: min-max)")
  if bands:
    ax.legend(loc="best", fontsize="small")


def _plot_population(fig: Any, axes: Any, records: List[Dict[str, Any]],
                     keys: List[str]) -> None:
  """Each PBT member's value of each key over env steps, coloured by its final return:
  where the population's values went, and which ended best."""
  from matplotlib import cm, colors  # pylint: disable=import-outside-toplevel
  members = runs_lib.by_run(records)
  finals = {m: next((r["episode_return"] for r in reversed(kept)
                     if r.get("episode_return") is not None), None)
            for m, kept in members.items()}
  known = [f for f in finals.values() if f is not None] or [0.0]
  norm = colors.Normalize(min(known), max(known) if max(known) > min(known) else
                          min(known) + 1.0)
  for ax, key in zip(axes, keys):
    for member, kept in members.items():
      points = [(r["env_steps"], r[key]) for r in kept if r.get(key) is not None]
      final = finals[member]
      color = cm.viridis(norm(final)) if final is not None else "tab:gray"
      if points:
        ax.step(*zip(*points), where="post", lw=1.0, color=color, alpha=0.8)
    values = [r[key] for r in records if r.get(key) is not None]
    if values and min(values) > 0 and max(values) / min(values) > 10:
      ax.set_yscale("log")
    ax.set_ylabel(key.rsplit(".", 1)[-1])
    ax.grid(alpha=0.3)
  fig.colorbar(cm.ScalarMappable(norm=norm, cmap="viridis"), ax=list(axes),
               label="member's final return")
