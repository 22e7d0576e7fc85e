"""The ``%%agent`` IPython magic: ``%load_ext kernel_agent`` in JupyterLab.

``cell.py`` the magic and its flags, ``view.py`` how a run looks in the
cell's outputs, ``kernels.py`` the warm kernel kept per IPython session,
``share.py`` variables shared from the user's notebook (``--share``). The
only part of kernel-agent that imports IPython.
"""
