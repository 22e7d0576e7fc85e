"""A run's data files: checked and copied (``data``, ``reading``), described by the confined describer
(``describer`` host side, ``describe_worker`` its process), summarised (``summaries``, with ``dates`` and
``dirty`` sniffing date orders and dirty columns)."""
