"""ExactSpec: exact speculative decoding. Runs unchanged in CPython and in Pyodide.

No module globals, no top-level `js` import (only `exactspec.bridge` touches the browser).
"""

__version__ = "0.1.0"
