"""One run, in named parts: ``agent`` (``AsyncAgent``, the wiring), ``staging`` (``DataStaging``),
``preparation`` (``Preparation``), ``loop`` (``RoundEngine``, ``Ask``), ``rounds`` (run mode's ``Rounds``),
``execution`` (``StreamedExecution``), ``history`` (the stuck guard, clipped feedback), ``quota`` (the disk
quota)."""
