"""Reading a store: conveniences above the engine (store/), which never imports them: alignment, views,
datasets, exports, pictures (docs/reading.md)."""
