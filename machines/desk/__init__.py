"""The desk: where the people that fail-closed hands work to see it and act on it.

Every definition ends its hardest cases with a person (an ``indeterminate`` outcome, an
Irreversible call awaiting approval, a transfer in ``manual_intervention``). The desk lists
what waits on a person, derived from the definitions (``waiting``), signs people in
(``accounts``, ``sessions``) and makes the moves the definitions let their roles make,
through the same path as any other move (``acting``), so that the store, and the database
under it, judges each one. ``app`` is the web application; ``machines desk`` serves it and
``machines pending`` lists the same for a script. It needs the ``desk`` extra.
"""
