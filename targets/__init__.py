"""Named hardware targets as data files, and their loader."""
