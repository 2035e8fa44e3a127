"""My RL components: importing this package registers them (A2C, and the Chain task)."""

from myrl import a2c, chain  # noqa: F401
