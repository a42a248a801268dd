// placeholder test file: filled in by the data/serialization work in progress.
#include <doctest/doctest.h>
