#!/usr/bin/env bash
# Quick-start command 2, and CI's (.ci/run): install what is missing, build, and run the test
# suite (CTest) in four stages, each built into a folder of its own:
#   1. build/             every test
#   2. build-asan-ubsan/  ASan + UBSan on the multi-rank and multi-process tests (labels
#                         multirank and multiprocess, the slow ones left out)
#   3. build-tsan/        TSan on the comm, ring and DDP suites (test_comm, test_comm_ring,
#                         test_nn_ddp)
#   4. build-fuzz/        the libFuzzer targets of tests/fuzz (clang), 30 s each from their corpus
# Tests that need a GPU, real MNIST or root skip themselves and say why. PyTorch (Debian's
# 1.13, for the drop-in-launcher and weights-interchange tests), Open MPI (mpirun), Slurm and
# munge (a 2-node Slurm in network namespaces), clang (the fuzzers) and clang-format (the layout
# check) are installed too, so those tests run rather than skip, and so is PyPI's torch 2.x,
# into a virtual environment in the build folder, for the ringgrad_torch backend's tests
# (scripts/install_torch.sh; SKIP_TORCH=1 leaves it out, and those tests skip). The sanitizer
# stages build with CUDA off and without the benchmarks, and the processes their tests start
# run instrumented too (scripts/sanitizer_env.sh); any report fails its test.
#   Arguments go to every stage's ctest, after the stage's own selection (say -R store).
#   STAGES="regular asan tsan fuzz" (the default) names the stages to run, in that order.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_packages.sh python3-torch python3-torchvision python3-venv openmpi-bin \
  clang-format clang libclang-rt-14-dev slurmctld slurmd slurm-client munge

# run_stage NAME BUILD_DIR [CTEST SELECTION...] -- [CTEST ARGS...], with the stage's build
# settings in the environment (CMAKE_ARGS, BUILD_TYPE, SANITIZE).
run_stage() {
  local name=$1 dir=$2
  shift 2
  local selection=()
  while [[ $1 != -- ]]; do selection+=("$1"); shift; done
  shift
  echo "=== test.sh: $name ($dir) ==="
  local start=$SECONDS
  (
    export BUILD_DIR=$dir
    [[ -z ${SANITIZE:-} ]] || source scripts/sanitizer_env.sh
    bash scripts/build.sh
    cd "$dir"
    ctest --output-on-failure --timeout 900 -j "${JOBS:-$(nproc)}" "${selection[@]}" "$@"
  )
  echo "=== test.sh: $name passed in $((SECONDS - start)) s ==="
}

sanitized() {  # CMake settings of a sanitizer stage
  echo "-DRINGGRAD_SANITIZE=$1 -DRINGGRAD_ENABLE_CUDA=OFF -DRINGGRAD_BUILD_BENCH=OFF"
}

for stage in ${STAGES:-regular asan tsan fuzz}; do
  case $stage in
    regular)
      # The PyTorch backend is built in this stage only: the Python that runs it is not
      # instrumented.
      torch_args=
      if [[ -z ${SKIP_TORCH:-} ]]; then
        torch_python=$(bash scripts/install_torch.sh "$(realpath -m build)/torch-venv")
        [[ -z $torch_python ]] || torch_args="-DRINGGRAD_PYTHON=$torch_python"
      fi
      CMAKE_ARGS="${CMAKE_ARGS:-} $torch_args" run_stage "the whole suite" build -- "$@"
      ;;
    asan)
      # Only what the selected tests run (their suites, and the binaries they start): the
      # single-process suites left out would take minutes to build instrumented.
      SANITIZE=address,undefined BUILD_TYPE=RelWithDebInfo \
        CMAKE_ARGS="${CMAKE_ARGS:-} $(sanitized address,undefined)" \
        BUILD_TARGETS="test_comm test_comm_ring test_comm_ring_faults test_comm_perf test_nn_ddp \
          test_launcher test_launcher_invocation test_multinode test_check test_netns \
          test_torch_interop test_torch_gloo ringgrad-train ringgrad-run worker_probe \
          ring_fault_worker skip_probe all_reduce_perf all_gather_perf broadcast_perf \
          reduce_scatter_perf" \
        run_stage "ASan + UBSan: multi-rank and multi-process tests" build-asan-ubsan \
        -L 'multirank|multiprocess' -LE slow -- "$@"
      ;;
    tsan)
      SANITIZE=thread BUILD_TYPE=RelWithDebInfo CMAKE_ARGS="${CMAKE_ARGS:-} $(sanitized thread)" \
        BUILD_TARGETS="test_comm test_comm_ring test_nn_ddp" \
        run_stage "TSan: the comm, ring and DDP suites" build-tsan \
        -R '^(test_comm|test_comm_ring|test_nn_ddp):' -- "$@"
      ;;
    fuzz)
      BUILD_TYPE=RelWithDebInfo CMAKE_ARGS="-DCMAKE_CXX_COMPILER=clang++ -DRINGGRAD_FUZZ=ON \
        -DRINGGRAD_ENABLE_CUDA=OFF" run_stage "fuzz: the parsers an outsider reaches" build-fuzz \
        -L fuzz -- "$@"
      ;;
    *)
      echo "test.sh: unknown stage '$stage' in STAGES; use regular, asan, tsan, fuzz" >&2
      exit 2
      ;;
  esac
done
