"""What reports across runs compute: statistics.py (IQM, aggregates, the stratified
bootstrap). Reading run folders and rendering the report is podracer/report.py's."""
