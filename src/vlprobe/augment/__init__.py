"""Caption-variant strategies (lexical, rule-based, neural, NL-Augmenter adapter).

Strategies write the variants file format of :mod:`vlprobe.data.variants`.
"""
