"""Replay components (`registry.replay`): where off-policy agents keep their experience.

They implement the experience interface of `podracer.experience` (Sample lives there):
an agent talks to its replay only through in-graph methods that mean the same thing for
every kind, so the agent's code does not change when `--config.replay.name` does:

  init(item_spec) -> state               item_spec: PyTree of jax.ShapeDtypeStruct, ONE item
  add(state, items, priorities) -> state items: PyTree of [N, ...] (e.g. sequences)
  can_sample(state) -> bool scalar       enough items to learn from
  sample(state, key) -> Sample           `batch_size` items, proportional to priority^alpha
  update_priorities(state, sample, priorities) -> state

Kinds (`kind` attribute):
  "device"  The buffer is a pytree inside the compiled program (Anakin; Sebulba learners).
            On a mesh each replica (device) owns its own shard of the buffer.
  "host"    The buffer is a server (Reverb, or `host`: host memory in this process,
            each environment's timeline stored once). The runtime inserts items and samples batches
            on the host; the in-graph state is the sampled batch (a `Sample`): `add` leaves
            it alone, `sample` returns it, `update_priorities` stores the new priorities in
            it for the runtime to send back. Host replays also implement the runtime side:
            `start(item_spec)`, `insert(items, priorities)`, `sample_batch(batch_size)`,
            `write_priorities(keys, priorities)`, `info()`, `close()`.

Runtimes report a replay's throughput (items inserted and sampled per second, and their
ratio) with `podracer.logs.metrics.RateMeter`, from running totals: a host replay's `info()`,
or a device replay's `counts(state)`, read on the host when a metrics record is written.
"""

from __future__ import annotations

from podracer.experience import Sample, importance_weights


__all__ = ["Sample", "importance_weights"]

# Importing the implementations registers them (Reverb itself is imported lazily).
from podracer.components.replay import device, host, reverb_replay  # noqa: E402,F401
