#!/usr/bin/env python3
"""ExactSpec set-up, build, serve, test and bench.

    python build.py setup          fetch pinned pieces into .cache/, check sha256, lay them out under static/
    python build.py serve [--port N]   setup, then serve the chat page on 127.0.0.1
    python build.py test [-- PYTEST ARGS]  setup, install the test extra, run pytest (2 workers; -- -n 0: one)
    python build.py bench NAME     run a benchmark script (prints measured figures)

Everything downloads by package name from the package registries only; after the first run it is offline.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "py"))

# re-exported for tests and scripts that `import build`
from exactspec_build.common import MODELS, WHEELS, SetupError, log, sha256_file  # noqa: E402,F401
from exactspec_build.fetch import CHAMPION, setup_champion, setup_npm, setup_pyodide  # noqa: E402,F401
from exactspec_build.server import default_models, make_server  # noqa: E402,F401
from exactspec_build.wheel import build_exactspec_wheel, write_rules  # noqa: E402


def setup_serve() -> None:
    setup_pyodide()
    build_exactspec_wheel()
    write_rules()


def cmd_serve(args) -> int:
    cmd_setup(args)
    srv = make_server(args.port)
    host, port = srv.server_address[:2]
    log(f"serving ExactSpec at http://{host}:{port}/  (Ctrl-C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


def cmd_setup(args) -> None:
    setup_champion()
    setup_npm()
    setup_serve()


def cmd_bench(args) -> int:
    """Run py/bench/NAME.py with the repo's package on the path; it prints its measured figures."""
    script = ROOT / "py" / "bench" / f"{args.name}.py"
    if not script.exists():
        names = sorted(p.stem for p in (ROOT / "py" / "bench").glob("*.py") if not p.stem.startswith("_"))
        raise SetupError(f"no benchmark named {args.name!r}; there are: {', '.join(names) or 'none'}")
    cmd_setup(args)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.call([sys.executable, str(script), *args.bench_args], cwd=ROOT, env=env)


def cmd_test(args) -> int:
    cmd_setup(args)
    log("installing the package with its test extra")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{ROOT}[test]"])
    if r.returncode != 0:
        raise SetupError("pip install -e .[test] failed (see above)")
    extra = list(args.pytest_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    # two workers (pytest-xdist), whole test files to each so module fixtures are built once: on the 2-core machine
    # the suite took 7.7 minutes, where one process had done 16% of it after 5 (much of a browser or Node test waits);
    # `python build.py test -- -n 0` runs it in one. The slowest tests are named at the end, so a run that grows
    # past its budget says where the time went.
    workers = [] if any(x.startswith(("-n", "--numprocesses")) for x in extra) \
        else ["-n", "2", "--dist", "loadfile"]
    return subprocess.call([sys.executable, "-m", "pytest", "-q", *workers, "--durations=25", *extra], cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="build.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="fetch and lay out pinned pieces")
    t = sub.add_parser("test", help="run the test suite")
    t.add_argument("pytest_args", nargs=argparse.REMAINDER)
    s = sub.add_parser("serve", help="set up, then serve the chat page on 127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    b = sub.add_parser("bench", help="run a benchmark from py/bench/")
    b.add_argument("name")
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "setup":
            cmd_setup(args)
            return 0
        if args.cmd == "test":
            return cmd_test(args)
        if args.cmd == "bench":
            return cmd_bench(args)
        if args.cmd == "serve":
            return cmd_serve(args)
    except SetupError as e:
        print(f"[build] error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
