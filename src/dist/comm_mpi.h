// The MPI communicator: CPU ranks (host memory) started by mpirun or by
// srun with PMIx, through OpenMPI. Built when the Makefile finds OpenMPI
// (LTC_WITH_MPI); otherwise comm_mpi_create fails with a message saying so.
#ifndef LTC_DIST_COMM_MPI_H
#define LTC_DIST_COMM_MPI_H

#include "dist/comm.h"

// Initialises MPI (once per process) and describes the world: rank and size
// of MPI_COMM_WORLD, local rank and size among the ranks sharing this node.
// Every operation fails after timeout_seconds without an answer. Run alone
// (no mpirun) it is a world of one.
Communicator *comm_mpi_create(double timeout_seconds, ErrorMessage *err);

// 1 when this build has MPI.
int comm_mpi_available(void);

#endif
