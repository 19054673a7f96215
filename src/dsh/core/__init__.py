"""The core every other layer of dsh stands on: errors, the JSON-RPC peer, the launch
contract, process control, the home, the carriers, redaction and install names.

It imports only the standard library (and, in :mod:`dsh.core.errors`, nothing at all), so
the SDK, the configuration, the runtime and the CLI can all use it; it never imports
them. ``docs/architecture.md`` draws the layers.
"""
