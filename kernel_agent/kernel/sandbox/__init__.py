"""Confinement of the kernel process, set up by the host before the kernel starts.

``bwrap.py`` the bubblewrap sandbox (namespaces, the read-only binds, the
workspace), ``seccomp.py`` its system-call filter, ``limits.py`` the limits
as a value and what a session holds for one kernel, ``cgroup.py`` the
kernel's cgroups, ``environment.py`` the allow-list of what the kernel's
environment may hold, ``limit_notes.py``
the words that name a limit behind an error. Host side: what runs inside
the kernel is ``kernel/inside/``.
"""
