"""The storage engine, the only code that knows the Zarr layout: writer, reader, index, parts, planning, compaction,
verification and repair. Reading conveniences (alignment, views, datasets, exports, pictures) live in reading/,
which imports this package; nothing here imports reading/."""

import warnings as _warnings

# The store keeps plain files beside its groups (_manifests/, _runs/, .staging/); zarr lists and ignores them.
_warnings.filterwarnings("ignore", message="Object at .* is not recognized as a component of a Zarr hierarchy")
