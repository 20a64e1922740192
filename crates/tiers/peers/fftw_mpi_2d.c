/* FFTW's MPI 2-D transform, the peer of `tiers bench fft2d`: a complex N x N forward DFT
 * distributed by rows over the ranks of MPI_COMM_WORLD, its output left transposed
 * (FFTW_MPI_TRANSPOSED_OUT), as tiers' transform leaves it.
 *
 * Usage: mpirun -n P fftw_mpi_2d N REPS
 * Prints "seconds_per_transform S" on rank 0: the maximum over ranks of the mean time of
 * REPS transforms, after one untimed transform (FFTW_ESTIMATE planning, no measuring runs).
 *
 * Built by `tiers bench fft2d` with mpicc when fftw3-mpi.h and libfftw3_mpi are present. */
#include <fftw3-mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    fftw_mpi_init();
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: fftw_mpi_2d N REPS\n");
        MPI_Finalize();
        return 2;
    }
    ptrdiff_t n = atol(argv[1]);
    int reps = atoi(argv[2]);
    if (n < 1 || reps < 1) {
        if (rank == 0) fprintf(stderr, "fftw_mpi_2d: N and REPS must be at least 1\n");
        MPI_Finalize();
        return 2;
    }
    ptrdiff_t local_n0, local_0_start, local_n1, local_1_start;
    ptrdiff_t alloc = fftw_mpi_local_size_2d_transposed(n, n, MPI_COMM_WORLD, &local_n0,
                                                        &local_0_start, &local_n1,
                                                        &local_1_start);
    fftw_complex *in = fftw_alloc_complex(alloc > 0 ? alloc : 1);
    fftw_complex *out = fftw_alloc_complex(alloc > 0 ? alloc : 1);
    if (!in || !out) {
        fprintf(stderr, "fftw_mpi_2d: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fftw_plan p = fftw_mpi_plan_dft_2d(n, n, in, out, MPI_COMM_WORLD, FFTW_FORWARD,
                                       FFTW_ESTIMATE | FFTW_MPI_TRANSPOSED_OUT);
    for (ptrdiff_t i = 0; i < local_n0 * n; i++) {
        in[i][0] = (double)((i * 7919 + local_0_start) % 1000) / 500.0 - 1.0;
        in[i][1] = (double)((i * 104729 + 3) % 1000) / 500.0 - 1.0;
    }
    fftw_execute(p);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int r = 0; r < reps; r++) fftw_execute(p);
    double t = (MPI_Wtime() - t0) / reps, tmax = 0;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("seconds_per_transform %.9f\n", tmax);
    fftw_destroy_plan(p);
    fftw_free(in);
    fftw_free(out);
    fftw_mpi_cleanup();
    MPI_Finalize();
    return 0;
}
