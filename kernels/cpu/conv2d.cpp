// placeholder: filled in by the kernels work in progress.
#include "kernels/ops.h"
