"""vlprobe: probing and interpretability for vision-language models.

Cache layer-wise hidden states of CLIP, LXMERT and UNITER on compositional benchmarks
(Winoground, SugarCrepe, VALSE) to HDF5, make caption variants, train probes with control
tasks, and write tidy CSVs and plots. The command line is ``probe``; see ``probe --help``.
"""

from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("vlprobe")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
