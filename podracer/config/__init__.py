"""A run's config: composing it from components (compose.py), reading config files
(files.py), the presets agents' configs are made of (presets.py), many runs and sweeps
(runs.py), a user's own modules (imports.py) and the checks before anything is built
(validation.py).
"""
