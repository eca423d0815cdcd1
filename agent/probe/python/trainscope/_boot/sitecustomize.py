"""trainscope's start-up hook for `trainscope run`, which puts this directory first on
PYTHONPATH: it runs the sitecustomize it hides (the next one on sys.path), then starts
trainscope.auto when TRAINSCOPE_AUTO is on. The trainscope package beside this directory is
imported without leaving anything on sys.path, so no other import of the job changes.
Never raises: a failure here is one line on stderr and the program runs as without it.
"""

import os
import sys


def _chain(here):
    import importlib.machinery
    import importlib.util

    paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - what site.py does with a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(e).__name__, e))


def _start(here):
    if os.environ.get("TRAINSCOPE_AUTO", "").strip().lower() in ("", "0", "false", "no", "off"):
        return
    if "trainscope" not in sys.modules:
        parent = os.path.dirname(os.path.dirname(here))  # <parent>/trainscope/_boot
        sys.path.insert(0, parent)
        try:
            import trainscope.auto  # noqa: F401
        finally:
            if sys.path and sys.path[0] == parent:
                del sys.path[0]
    import trainscope.auto
    trainscope.auto.install_from_environment()


def _main():
    here = os.path.dirname(os.path.abspath(__file__))
    _chain(here)
    try:
        _start(here)
    except Exception as e:  # noqa: BLE001 - the program runs unmonitored
        sys.stderr.write("trainscope: cannot start monitoring: %r\n" % (e,))


_main()
