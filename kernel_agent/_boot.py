"""The entry of every Python module we start as a process: ``python -I /abs/kernel_agent/_boot.py MODULE ARGS``.

Run as a script, isolated (``_python.python_argv``): nothing of the current folder is importable. It puts
the folder holding the ``kernel_agent`` it sits in first on ``sys.path`` (so the module is ours, from
where we are installed, even in another environment) and runs ``MODULE`` as ``__main__`` with ``ARGS``
as its ``sys.argv[1:]``. Standard library only; imports nothing of ours itself.
"""

import os
import runpy
import sys


def _main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if sys.path[:1] != [root]:
        sys.path.insert(0, root)
    del sys.argv[0]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main()
