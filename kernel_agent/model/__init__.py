"""The model seam: ``ChatModel`` (one method, ``stream``: a reply in typed pieces, ending in the whole
reply), the chat messages' shapes, the OpenAI-compatible client that is the only importer of ``openai``,
the scripted model for demos and tests, and the ``kernel_agent.models`` registry that makes a model from
its name (``registry.make_model``)."""
