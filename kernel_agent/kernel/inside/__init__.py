"""What runs inside the kernel process, in the sandbox, beside the analysed (untrusted) code.

``launcher.py`` is the kernel's entry point (it lowers the rlimits, then
becomes ipykernel), ``handover.py`` what the host hands it in the environment,
``startup.py`` the one-line ``PYTHONSTARTUP`` that installs ``figure_cap.py``.
Nothing here imports anything of kernel-agent's from outside this folder (a
test holds it to that): the kernel process loads only this folder, and the
host never trusts what comes back from it.
"""
