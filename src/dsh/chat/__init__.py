"""dsh.chat: the terminal chat (``dsh chat``), a client of the SDK protocol in the user's
Python. :mod:`.launch` is what the launcher calls; the UI (:mod:`.app`) loads only then."""
