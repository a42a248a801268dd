# Sourced by scripts/test.sh when SANITIZE is set: the sanitizers' run-time options, exported
# so that the processes a test starts (launchers, workers, perf binaries) run under them too.
# Every report stops its process with a non-zero exit, so the test that started it fails.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$here/sanitizer.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$here/sanitizer.supp"
# OpenBLAS's pthread pool and libgomp's team are not built with TSan, which then reports
# their internal synchronisation as races; one OpenBLAS thread (as our kernels use it anyway,
# Note [BLAS threads]) removes the first source.
export OPENBLAS_NUM_THREADS=1
