"""The runtime's import path before it moved into ``dsh.runtime``, kept for one release.

Only the two modules plugin authors were taught to import remain, each re-exporting its
new home: ``dsh_runtime.plugin`` (:mod:`dsh.runtime.kernel.plugin`) and
``dsh_runtime.tools.base`` (:mod:`dsh.runtime.tools.base`). Importing either prints one
line on stderr naming the new path (:func:`dsh.runtime.kernel.loader.note_moved`).
"""
