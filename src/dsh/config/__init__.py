"""Configuration: profiles, patch layers, composition into one config tree, and the
environment snapshot, resolved from files into the runtime's launch.

Composition is data, not execution: nothing here imports the runtime or the CLI.
"""
