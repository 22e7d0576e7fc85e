"""The agent inside JupyterLab: a Jupyter AI v3 persona whose rounds become cells in an open notebook.

``pip install kernel-agent[jupyter]`` registers ``KernelAgentPersona`` (``persona.py``) under Jupyter
AI's ``jupyter_ai.personas`` entry point. In a JupyterLab chat, a message to ``KernelAgent`` runs the
agent: the reply streams into the chat (``chat.py``, pure), and each round is written into the
notebook's shared document on the server as it finishes (``live.py``), the very cells the exported
notebook has; ``kernels.py`` finds the notebook's own kernel (to run in it, opt-in) and its interrupts. The modules
here import Jupyter AI, jupyterlab-chat and jupyter-server-ydoc; nothing
else in kernel_agent does. Nothing is imported here: the entry point loads ``persona.py``.
"""
