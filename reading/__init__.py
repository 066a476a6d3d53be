"""Reading a store: conveniences above the engine (store/), which never imports them.

align.py (rows of several features on one reference), views.py (those alignments materialised once into a
store of their own), datasets.py (PyTorch datasets of the Social-IQ tasks), export.py (the CMU SDK's files and
xarray), inspect.py (one item as a picture). docs/reading.md says how to use them; docs/design.md draws where
they sit.
"""
