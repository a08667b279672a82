"""One script per figure or table; run as ``python -m experiments.NAME [--quick]``."""
