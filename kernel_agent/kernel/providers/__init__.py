"""Where a kernel lives: the provider seam (``base.py``) and its implementations.

``local.py`` a process we start on this machine (inside the sandbox) or one we
attach to; ``gateway/`` a kernel on a Jupyter Kernel Gateway or Enterprise
Gateway. Each is a ``KernelProvider``; the engine and session above never
ask which: a session makes its provider by name (``registry.py``: the
``kernel_agent.providers`` entry points, where ours are registered as a third
party's are). Host side: nothing here runs in the kernel process.
"""
