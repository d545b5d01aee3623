import os
import sys
from pathlib import Path

# One BLAS thread: OpenBLAS's spinning second thread collapses the reference's speed on a busy 2-core machine
# (must be set before numpy is imported). Results are bitwise the same with 1 or 2 threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "py", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
