"""Where a run's records go: the `Logger` interface (base.py), one module a sink
(jsonl.py, csv.py, tensorboard.py, wandb.py), the default set (default.py), and what
drives them, the progress line and the plot (metrics.py; disk.py names a failing disk).
The `loggers` registry kind (podracer/components/loggers) registers the sinks by name.
"""

from podracer.logs.base import CSV_FILE, METRICS_FILE, Logger
from podracer.logs.csv import CsvLogger, read_csv
from podracer.logs.default import default_loggers
from podracer.logs.jsonl import JsonlLogger
from podracer.logs.tensorboard import TensorBoardLogger
