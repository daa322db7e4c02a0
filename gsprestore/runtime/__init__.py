"""Running methods on real inputs: the tiled engine, one file, files and folders, more than one
process."""
