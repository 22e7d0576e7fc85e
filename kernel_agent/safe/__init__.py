"""Showing what the kernel, the model or a notebook made: data, never instructions.

One module per medium owns "make this safe to show", and every renderer goes through it
(``tests/test_safe.py`` holds them to it, as ``tests/test_door.py`` does for file I/O):

- ``html``: HTML fragments, display bundles and markdown for a page or a notebook front end
  (the ``%%agent`` magic, ``show --html``, the service's report, the chat persona);
- ``http``: the headers a document served over HTTP carries (a CSP that forbids scripts and
  external loads, ``nosniff``, ``attachment``), and the web page's own CSP;
- ``terminal``: kernel and model text made safe to print (control characters shown, never obeyed).

It imports nothing of kernel_agent: every layer above the shared values may use it.
"""
