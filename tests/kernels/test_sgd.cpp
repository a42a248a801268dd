// placeholder test file: filled in by the kernels work in progress.
#include <doctest/doctest.h>
