"""The agent layer: ``AsyncAgent`` (``agent``) wiring a run's parts (``staging``: the data files;
``preparation``: setup cell, probe, opening prompt; ``loop``: the rounds), its sync facade,
configuration, protocols (how code and results travel in the conversation), data files and their
summaries, history helpers and ``PythonTool``."""
