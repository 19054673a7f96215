"""The agent: sessions, the turn loop and the ``agent`` service the protocol servers drive."""
