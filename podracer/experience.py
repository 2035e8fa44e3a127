"""The experience interface: what an agent learns from, and how a runtime feeds it.

Experience takes one of two forms, by where it lives.

In-graph: the experience state is a pytree inside the compiled learner step, and a
runtime only calls `agent.init_experience`, `agent.observe` and `agent.update`.
  - No replay (`agent.replay is None`, on-policy agents): the state is room for the
    latest [T+K, B] trajectory; `observe` replaces it.
  - A device replay (`agent.replay.kind == "device"`): the state is the buffer; `observe`
    adds `agent.replay_items(trajectory)`, `update` samples it and writes the new
    priorities back into it. Each replica (device of the mesh) owns its own shard.

Host: the replay is a server (`agent.replay.kind == "host"`: Reverb, or the host-memory
replay) that the runtime drives on the host, around the compiled step:
  1. actors insert `agent.replay_items(trajectory)` ([B, ...] items; `insert`);
  2. the learner draws a batch (`sample_batch` -> items, keys, probabilities, size) and
     hands it to `update` as the in-graph experience, a `Sample` (`sample_for_replicas`);
     in the graph the replay's `sample` returns it and `update_priorities` stores the
     new priorities in it (`add` leaves it alone);
  3. the runtime sends `sample.priorities` back with `write_priorities(keys, ...)`.

So an agent calls the same in-graph methods for every replay, and its code does not
change when `--config.replay.name` does. Runtimes learn the form from `host_replay`, and
never import a replay implementation.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Protocol, Sequence, Tuple

import jax
import numpy as np

from podracer.types import PyTree


class Sample(NamedTuple):
  """A batch drawn from a replay, with what prioritized replay's corrections need."""
  items: PyTree              # [batch, ...] the sampled items
  ids: jax.Array             # [batch] int32: each item's id in the replay that drew it,
                             # opaque to agents: that replay's `update_priorities` reads it
  probabilities: jax.Array   # [batch] float32: the probability each item was drawn with
  size: jax.Array            # [] int32: items in the replay when the batch was drawn
  priorities: jax.Array      # [batch] float32: new priorities (host kind), else unused


class Replay(Protocol):
  """The in-graph methods every replay has (pure functions of its state)."""
  kind: str          # "device" or "host"
  batch_size: int    # items per sample, per replica

  def init(self, item_spec: PyTree) -> PyTree: ...  # item_spec: ONE item's shapes
  def add(self, state: PyTree, items: PyTree, priorities: Any = None) -> PyTree: ...
  def can_sample(self, state: PyTree) -> jax.Array: ...
  def sample(self, state: PyTree, key: jax.Array) -> Sample: ...
  def update_priorities(self, state: PyTree, sample: Sample,
                        priorities: jax.Array) -> PyTree: ...
  # Optional: counts(state) -> (inserts, samples) totals, for replay rates in metrics;
  # size(state) -> items held.


class HostReplay(Replay, Protocol):
  """A replay server the runtime drives from host threads (kind == "host")."""

  min_size: int  # items held before the first sample (the learner's warm-up)

  # overlap: Trajectory items of one actor thread repeat the last `overlap` entries of its
  # previous ones (the agent's trajectory_overlap); a replay may store them once.

  def start(self, item_spec: PyTree, overlap: int = 0) -> None: ...
  def insert(self, items: PyTree, stream: Any = None) -> None: ...  # ReplayTimeout: retry
  def sample_batch(self, n: int) -> Tuple[PyTree, Sequence[Any], np.ndarray, int]: ...
  def write_priorities(self, keys: Sequence[Any], priorities: np.ndarray) -> None: ...
  def info(self) -> Dict[str, int]: ...  # replay_size, replay_inserts, replay_samples
  #                                          (optional: replay_bytes)
  def close(self) -> None: ...
  # Optional, for a replay the run's checkpoints include (`checkpointed`, the config's
  # `replay.checkpoint`): `use_checkpoint_dir(path)` before `start` (where it saves, and
  # starts from the latest checkpoint there), `checkpoint(keep)` with each of the run's.


def host_replay(agent: Any) -> Optional[HostReplay]:
  """The agent's replay if it is a host replay, else None (its experience is in-graph)."""
  replay = getattr(agent, "replay", None)
  return replay if getattr(replay, "kind", None) == "host" else None


def sample_for_replicas(items: PyTree, probabilities: Any, size: int,
                        num_replicas: int) -> Sample:
  """A host batch of n * batch items as a `Sample` of [n, batch, ...], one per replica.

  `ids` are the rows of the host batch (the host replay matches priorities back to its
  keys by them) and the priorities start at zero, for `update_priorities` to fill.
  """
  count = len(probabilities)
  sample = Sample(items=items, ids=np.arange(count, dtype=np.int32),
                  probabilities=np.asarray(probabilities, np.float32),
                  size=np.full(count, size, np.int32),
                  priorities=np.zeros(count, np.float32))
  sample = jax.tree.map(lambda x: x.reshape(num_replicas, -1, *x.shape[1:]), sample)
  return sample._replace(size=sample.size[:, 0])  # a scalar per replica


def importance_weights(sample: Sample, exponent: float) -> jax.Array:
  """Prioritized replay's (size * P(i))^-beta, normalised by its maximum (Schaul et al.)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  size = jnp.maximum(sample.size.astype(jnp.float32), 1.0)
  weights = jnp.power(size * jnp.maximum(sample.probabilities, 1e-12), -exponent)
  return weights / jnp.max(weights)
