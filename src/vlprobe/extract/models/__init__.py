"""Model adapters: what each model family declares (streams, layers, scores) and how it loads.

:mod:`.base` holds the adapter contract, :mod:`.hf` the one Hugging Face loading helper,
:mod:`.pooling` the shared token poolings; one module per family (:mod:`.clip`, :mod:`.lxmert`,
:mod:`.uniter`, :mod:`.blind`).
"""
