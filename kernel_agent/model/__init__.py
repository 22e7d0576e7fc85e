"""The model seam: ``ChatModel`` (one method, ``complete``), the OpenAI-compatible
client that is the only importer of ``openai``, and the scripted model for demos and tests."""
