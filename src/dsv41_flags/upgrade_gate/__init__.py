"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The upgrade gate: would each feature install on an engine release that is not installed? Read from the release's source (no install, no import)."""
