"""kernel-agent: an LLM analyses data in rounds against a live Jupyter kernel."""

from ._version import __version__

__all__ = ["__version__"]
