import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "py", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
