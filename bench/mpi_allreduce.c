/* Open MPI's MPI_Allreduce (float sum) over a byte-size sweep, for bench/compare_allreduce.sh.
 * Prints "size_bytes time_us busbw_GBps" per size on rank 0, busbw = algbw * 2(n-1)/n.
 * Usage: mpirun -np N --mca btl tcp,self mpi_allreduce MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const long min_bytes = atol(argv[1]), max_bytes = atol(argv[2]);
  const int factor = atoi(argv[3]), iters = atoi(argv[4]), warmup = atoi(argv[5]);
  float* send = malloc(max_bytes);
  float* recv = malloc(max_bytes);
  for (long i = 0; i < max_bytes / 4; ++i) send[i] = (float)(rank * 1000 + i % 1000);
  for (long bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const int count = (int)(bytes / 4);
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double local = (MPI_Wtime() - t0) / iters * 1e6, worst;
    MPI_Reduce(&local, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
      printf("%ld %.2f %.3f\n", bytes, worst, bytes / worst / 1e3 * 2.0 * (world - 1) / world);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
