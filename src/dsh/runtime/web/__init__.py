"""The ``web`` application: a loopback HTTP API over the agent, and a page that uses it.

:mod:`.plugin` registers ``main`` (options and help, no heavy imports), :mod:`.server`
binds the socket and runs uvicorn on the runtime's loop, :mod:`.routes` is the Starlette
application, :mod:`.guard` the Host and token checks, :mod:`.streams` the server-sent
event streams, :mod:`.approvals` the parked guarded tool calls; ``static/`` is the page.
"""
