"""Exit codes of `python -m pipeline` (documented in README.md, "Exit codes")."""

OK = 0  # everything asked for is done (or was already up to date)
INTERNAL = 1  # a bug: Python's own traceback follows (extract: then the summary and report, pipeline/supervise.py)
BAD_INPUT = 2  # bad arguments, config, raw data root or store schema/dataset; nothing was computed
FAILURES = 3  # the run completed, but some (feature, item) pairs failed (listed as FAILED lines)
DAMAGED = 4  # damaged items found in the store and not recomputed (verify; extract's leftovers)
STORE = 5  # the store cannot be written: read-only, not a folder, disk full, unreadable root metadata
LOCKED = 6  # another run holds the store's lock: retry when it has finished
RAY = 7  # Ray did not start (twice), or its raylet/GCS died during the run: committed pairs kept, summary and report
CLOSED_PIPE = 141  # the reader of the output went away (`info --json | head`): stopped quietly, as SIGPIPE would
INTERRUPTED = 130  # stopped by SIGINT (Ctrl-C): committed pairs kept, summary and run report written
TERMINATED = 143  # stopped by SIGTERM: the same
# 128 + N otherwise: extract's driver killed by signal N from outside (137: SIGKILL, the out-of-memory killer)
