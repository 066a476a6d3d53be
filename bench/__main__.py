"""`make bench`: every benchmark with its defaults, one after the other; each prints its own figures."""

import importlib
import pkgutil
import sys
import time
from pathlib import Path

names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
failed = []
for name in names:
    print(f"\n== {name}", flush=True)
    t0 = time.perf_counter()
    try:
        sys.argv = [name]  # each benchmark parses its own (default) arguments
        importlib.import_module(f"bench.{name}").main()
    except Exception as e:  # one broken benchmark must not hide the others' figures
        failed.append(name)
        print(f"{name} failed: {type(e).__name__}: {e}")
    print(f"({time.perf_counter() - t0:.0f} s)", flush=True)
sys.exit(1 if failed else 0)
