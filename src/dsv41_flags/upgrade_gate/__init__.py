"""The upgrade gate: would each feature install on an engine release that is not installed? Read from the release's source (no install, no import)."""
