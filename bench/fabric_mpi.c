/* Open MPI's MPI_Bcast and MPI_Reduce (sum of floats) of the same bytes as
 * bench/fabric.c, from rank 0 on the memoryx host to the ranks on the
 * wse-node hosts, for comparison. Prints per iteration
 * "iter K bcast_s T reduce_s T" (rank 0, between barriers). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long long bytes = argc > 1 ? atoll(argv[1]) : 64ll << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 5;
    int n = (int)(bytes / sizeof(float));
    float *buf = malloc(bytes), *sum = malloc(bytes);
    if (!buf || !sum)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < n; i++)
        buf[i] = rank == 0 ? 0.0f : (float)rank;
    for (int it = 1; it <= iters; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Bcast(buf, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        for (int i = 0; i < n; i++)
            buf[i] = rank == 0 ? 0.0f : (float)rank;
        MPI_Barrier(MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        MPI_Reduce(buf, sum, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t3 = MPI_Wtime();
        if (rank == 0) {
            if (sum[n / 2] != (float)((size - 1) * size / 2))
                MPI_Abort(MPI_COMM_WORLD, 2);
            printf("iter %d bcast_s %.6f reduce_s %.6f\n", it, t1 - t0, t3 - t2);
            fflush(stdout);
        }
    }
    free(buf);
    free(sum);
    MPI_Finalize();
    return 0;
}
