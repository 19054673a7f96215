"""Tests of the launcher (the ``dsh`` package outside the SDK), mirroring its modules."""
