"""Classical interpolation, no graph: bilinear, Malvar 2004 and Menon 2007 demosaicking, the bicubic
2x."""
