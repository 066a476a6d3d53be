"""Decoding: a file (or a manifest's texts) becomes a decoded input, `extractors/base.py`'s types, as players show
it. The container's timeline and stream choice (container.py), audio (audio.py), frames (decode.py), the displayed
picture (picture.py), frames on the GPU (nvdec.py), captions (captions.py), cut clips (cut.py), stills and texts
(inputs.py), and one module per input kind (kinds/). No Ray, Zarr, store or run configuration here (an
import-linter contract): the pipeline's decode tasks and the reading layer's pictures both call it."""
