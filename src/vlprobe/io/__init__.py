"""Writing outputs safely: atomically, with the user's umask, never over a file vlprobe did not write.

One module per idea:

:mod:`~vlprobe.io.atomic`
    An output is written to ``.NAME.vlprobe-tmp`` beside it and renamed onto ``NAME`` when
    complete, so it appears whole or not at all; a failed write leaves the old file as it was.
    A new output gets the mode :func:`open` would give it (``0o666`` less the umask); a replaced
    one keeps its mode.
:mod:`~vlprobe.io.ownership`
    Files vlprobe writes whole are listed in their folder's ``.vlprobe-outputs.json`` with the
    writer's ``kind`` and their sha256; an existing file is replaced only when that list names it
    under the same kind with its current content. Output folders are claimed the same way.
:mod:`~vlprobe.io.locks`
    A writer holds an ``flock`` on ``.NAME.vlprobe-lock`` while it writes ``NAME``.
:mod:`~vlprobe.io.errors`
    What an error from the OS, HDF5 or safetensors means: a full disk is raised as an
    :class:`OSError` that names the output.
:mod:`~vlprobe.io.paths`
    Output folders, the fixed temporary name beside an output, whether a path can be written.
:mod:`~vlprobe.io.h5`
    HDF5 files vlprobe writes: closing, discarding after a failed write, their format name and
    version.
:mod:`~vlprobe.io.text`
    Reading a UTF-8 text file line by line, a non-UTF-8 one refused naming the line.

The package imports no other subpackage of vlprobe: every layer may use it.
"""
