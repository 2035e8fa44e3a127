"""podracer: the Podracer architectures (Anakin, Sebulba) as a pluggable JAX framework."""

__version__ = "0.1.0"
