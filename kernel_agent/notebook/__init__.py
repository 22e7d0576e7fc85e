"""The notebook layer: export runs as replayable notebooks, load them back, replay them."""
