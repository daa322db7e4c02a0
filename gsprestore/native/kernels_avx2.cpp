// kernels.cpp compiled with -mavx2 -mfma (setup.py): a separate translation unit so that the
// two builds of the same source get separate object files.
#include "kernels.cpp"
