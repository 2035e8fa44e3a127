"""Sebulba (Podracer paper, section 3.2): CPU environments, actor devices, learner devices.

Threads, all started and stopped by `Sebulba.train` (runtime.py):
  actors   (actor.py) `actor_threads_per_device` per actor device, each with its own
           batched host environment; while one thread steps its environments the device
           runs the other's inference. Each assembles a [T+K, B] trajectory on its device
           (podracer/trajectories.py) and `put`s it into the run's one channel for
           experience (host/channel.py): split along B over the learner devices and
           queued (`TrajectoryQueue`), or inserted into a host replay (`TrajectoryReplay`).
  learner  (host/learner.py) one loop that `get`s from the channel: a queued trajectory
           (`TrajectoryUpdate`: observe + `updates_per_batch` x update, over the learner
           devices) or a host replay's samples (`SampleUpdate`); pushes the new
           parameters to every actor device (host/params.py) after each update.
  main     supervises: logs metrics, and stops everything within a second when a thread
           fails (re-raising its traceback), on Ctrl-C, when the step budget is spent, or
           when the logger reports the target return (`stop_at_return`) reached
           (host/threads.py; host/runtime.py: what Sebulba shares with SEED).
"""

from podracer.errors import ThreadFailure
from podracer.runtimes.host.params import ParamsStore
from podracer.runtimes.sebulba.runtime import Sebulba, SebulbaOptions

__all__ = ["Sebulba", "SebulbaOptions", "ParamsStore", "ThreadFailure"]
