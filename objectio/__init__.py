"""Object storage (s3://, gs://, az://) for every layer that reads or writes it: the store's object backend
(store/backends/objects.py) and the raw data a run reads from a bucket (`--raw s3://bucket/prefix`: manifests,
questions, captions, videos). The one package that imports the object-storage library (obstore, the Rust
`object_store` zarr-python 3 wraps): an import-linter contract says so. It sits at the bottom, beside atomicio,
because media/ and manifests/ (which may not import store/) read raw objects too.

- client.py: a URL becomes a client with the AWS tools' credentials and endpoint; a failure becomes one line
  naming the URL and what to set.
- paths.py: `ObjectPath`, the part of pathlib.Path the manifest readers and decoders use, over one listing of
  the raw prefix (so a manifest reader is the same code for a folder and a bucket).
- cache.py: a video decoded from a bucket is read from a bounded, least-recently-used copy on the node's disk.

obstore loads only when a URL is used: a local run never imports it.
"""

from __future__ import annotations

from objectio.paths import SCHEMES, ObjectPath, RawUnavailable, as_path, is_url, raw_root

__all__ = ["SCHEMES", "ObjectPath", "RawUnavailable", "as_path", "is_url", "raw_root"]
