# Sourced by scripts/test.sh when SANITIZE is set: the sanitizers' run-time options, exported so
# that every process a test starts (ringgrad-run, its workers, the perf binaries) inherits them.
# Any report stops that process with a non-zero exit, so the test that started it fails.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:strict_init_order=1"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$here/tsan.supp:print_suppressions=0"
# OpenBLAS is not instrumented: under TSan its own thread pool's hand-offs look like races. One
# OpenBLAS thread removes the pool; our kernels ask for one anyway (kernels/cpu/threads.cpp,
# Note [BLAS threads]), this covers the moment before they do.
export OPENBLAS_NUM_THREADS=1
# libgomp is not instrumented either, so TSan cannot see the barrier that ends a parallel region
# and reports every tensor freed after one as a race with the team's reads (often with the
# team's stack lost, so no suppression can match it). OMP_THREAD_LIMIT=1 caps every team at one
# thread, even in programs that ask for more (ringgrad-train --threads 2): TSan's attention
# stays on the races it is here for, between our own threads; races within one kernel's
# parallel loop stay outside its reach.
if [[ ${SANITIZE:-} == thread ]]; then export OMP_THREAD_LIMIT=1; fi
