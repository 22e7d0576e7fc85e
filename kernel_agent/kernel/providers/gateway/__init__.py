"""Kernels on a Jupyter Kernel Gateway or Enterprise Gateway (the Jupyter Server REST + websocket API).

``settings.py`` holds where the gateway is and its token (a secret);
``rest.py`` the REST calls (start, interrupt, restart, delete a kernel);
``channels.py`` the websocket that carries the kernel's messages;
``provider.py`` puts them together as a ``KernelProvider``;
``nodelay.py`` is for the gateway's operator (a websocket connection class
that sets TCP_NODELAY on the server's side). Nothing here imports the layers
above the kernel layer.
"""
