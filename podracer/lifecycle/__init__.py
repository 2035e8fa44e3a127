"""Wrapping a run: its workdir (workdir.py), checkpoints (checkpoint.py), the guard on
non-finite steps (guards.py), SIGTERM and preemption (preemption.py), evaluation
(evaluation.py) and the memory check before it starts (memory.py).
"""
