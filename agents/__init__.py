"""Agents that ship with podracer; importing this registers them."""

from agents import d4pg  # noqa: F401
from agents import dqn  # noqa: F401
from agents import impala  # noqa: F401
from agents import muzero  # noqa: F401
from agents import ppo  # noqa: F401
from agents import pqn  # noqa: F401
from agents import r2d2  # noqa: F401
from agents import sac  # noqa: F401
from agents import td3  # noqa: F401
