"""The agent layer: the run in named parts (``run/``: ``AsyncAgent`` wiring ``staging``, the data files;
``preparation``: setup cell, probe, opening prompt; ``loop``: the one round engine), its sync facade,
configuration, protocols (how code and results travel in the conversation), the data files and their
summaries (``datafiles/``), plan mode (``plan/``) and ``PythonTool``."""
