"""Set-up helpers for build.py (standard library only: build.py runs before anything is installed).

exactspec_build.common  paths, logging, the SetupError every step raises, sha256 of files
exactspec_build.fetch   pinned pieces: the champion, npm packages, the Pyodide runtime (sha256-checked)
exactspec_build.wheel   the browser wheel of the runtime package py/exactspec
exactspec_build.server  the static HTTP server of the page and its /manifest.json
"""
