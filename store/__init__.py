"""The only code that knows the Zarr layout: writer, reader, planning, alignment, datasets, exports."""

import warnings as _warnings

# The store keeps plain files beside its groups (_manifests/, _runs/, .staging/); zarr lists and ignores them.
_warnings.filterwarnings("ignore", message="Object at .* is not recognized as a component of a Zarr hierarchy")
