// OpenMPI, opened at run time (see util/dynamic_library.h): only CPU ranks
// need it, and a cluster's own OpenMPI is the one that matches its mpirun
// or srun, so the program (the pip wheel's too) carries none and links
// none. Built against OpenMPI's header (LTC_WITH_MPI); comm_mpi.c includes
// this after <mpi.h>.
#ifndef LTC_DIST_MPI_LIBRARY_H
#define LTC_DIST_MPI_LIBRARY_H

#include "util/error.h"

// The library opened: $LTC_MPI_LIBRARY when set (another OpenMPI build, or
// a missing name in tests), else libmpi.so.40, the soname of OpenMPI 3 to 5.
const char *mpi_library_file(void);

#ifdef LTC_WITH_MPI
// Loads it once, with RTLD_GLOBAL (OpenMPI's own plugins resolve their
// symbols in it); 0, or -1 with the reason.
int mpi_library_open(ErrorMessage *err);

// OpenMPI's predefined handles are addresses of objects inside libmpi
// (mpi.h's OMPI_PREDEFINED_GLOBAL); unlinked, they are read from the
// loaded library instead. The names comm_mpi.c uses, redefined.
typedef struct MpiHandles {
    void *comm_world, *comm_null, *request_null, *info_null, *errors_return;
    void *type_float, *type_byte, *op_sum, *op_max;
} MpiHandles;
extern MpiHandles mpi_handles;

#undef MPI_COMM_WORLD
#undef MPI_COMM_NULL
#undef MPI_REQUEST_NULL
#undef MPI_INFO_NULL
#undef MPI_ERRORS_RETURN
#undef MPI_FLOAT
#undef MPI_BYTE
#undef MPI_SUM
#undef MPI_MAX
#define MPI_COMM_WORLD ((MPI_Comm)mpi_handles.comm_world)
#define MPI_COMM_NULL ((MPI_Comm)mpi_handles.comm_null)
#define MPI_REQUEST_NULL ((MPI_Request)mpi_handles.request_null)
#define MPI_INFO_NULL ((MPI_Info)mpi_handles.info_null)
#define MPI_ERRORS_RETURN ((MPI_Errhandler)mpi_handles.errors_return)
#define MPI_FLOAT ((MPI_Datatype)mpi_handles.type_float)
#define MPI_BYTE ((MPI_Datatype)mpi_handles.type_byte)
#define MPI_SUM ((MPI_Op)mpi_handles.op_sum)
#define MPI_MAX ((MPI_Op)mpi_handles.op_max)
#endif

#endif
