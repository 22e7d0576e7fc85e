"""The agent layer: the analysis loop (``loop``), its sync facade, configuration,
protocols (how code and results travel in the conversation), data files and
their summaries, history helpers and ``PythonTool``."""
