"""Pictures: the drawing helpers of compare and explain, and what a graph model uses on one image."""
