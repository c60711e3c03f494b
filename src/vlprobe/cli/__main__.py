"""``python -m vlprobe.cli``: the ``probe`` command."""

from vlprobe.cli import main

main()
