// The MPI functions comm_mpi.c calls, forwarded into the OpenMPI library
// opened at run time, and its predefined handles (see mpi_library.h).
// An MPI function or predefined handle (MPI_INT: ompi_mpi_int) used
// elsewhere but missing here and in mpi_library.h is an undefined reference
// when the program is linked: add it.
#include <stdlib.h>

#ifdef LTC_WITH_MPI
#include <mpi.h>
#endif

#include "dist/mpi_library.h"

const char *mpi_library_file(void) {
    const char *file = getenv("LTC_MPI_LIBRARY");
    return file && file[0] ? file : "libmpi.so.40";
}

#ifdef LTC_WITH_MPI

#include <dlfcn.h>

#include "util/dynamic_library.h"

#define MPI_FUNCTIONS(X)                                                                       \
    X(int, MPI_Initialized, (int *flag), (flag))                                               \
    X(int, MPI_Finalized, (int *flag), (flag))                                                 \
    X(int, MPI_Init_thread, (int *argc, char ***argv, int required, int *provided),            \
      (argc, argv, required, provided))                                                        \
    X(int, MPI_Finalize, (void), ())                                                           \
    X(int, MPI_Abort, (MPI_Comm c, int code), (c, code))                                       \
    X(int, MPI_Error_string, (int code, char *text, int *length), (code, text, length))        \
    X(int, MPI_Comm_set_errhandler, (MPI_Comm c, MPI_Errhandler h), (c, h))                    \
    X(int, MPI_Comm_rank, (MPI_Comm c, int *rank), (c, rank))                                  \
    X(int, MPI_Comm_size, (MPI_Comm c, int *size), (c, size))                                  \
    X(int, MPI_Comm_split_type, (MPI_Comm c, int type, int key, MPI_Info i, MPI_Comm *out),    \
      (c, type, key, i, out))                                                                  \
    X(int, MPI_Comm_free, (MPI_Comm * c), (c))                                                 \
    X(int, MPI_Test, (MPI_Request * r, int *flag, MPI_Status *status), (r, flag, status))      \
    X(int, MPI_Iallreduce,                                                                     \
      (const void *send, void *recv, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,         \
       MPI_Request *r),                                                                        \
      (send, recv, count, t, op, c, r))                                                        \
    X(int, MPI_Iallgather,                                                                     \
      (const void *send, int send_count, MPI_Datatype send_type, void *recv, int recv_count,   \
       MPI_Datatype recv_type, MPI_Comm c, MPI_Request *r),                                    \
      (send, send_count, send_type, recv, recv_count, recv_type, c, r))                        \
    X(int, MPI_Ibcast, (void *buffer, int count, MPI_Datatype t, int root, MPI_Comm c,         \
                        MPI_Request *r),                                                       \
      (buffer, count, t, root, c, r))                                                          \
    X(int, MPI_Ibarrier, (MPI_Comm c, MPI_Request * r), (c, r))

MpiHandles mpi_handles;

DYNAMIC_LIBRARY(MPI_FUNCTIONS, mpi_library_open, "OpenMPI", mpi_library_file(),
                RTLD_NOW | RTLD_GLOBAL,
                "several CPU ranks need OpenMPI's library (Debian/Ubuntu: apt-get install "
                "libopenmpi3; on a cluster: module load openmpi), or run one process",
                {"ompi_mpi_comm_world", &mpi_handles.comm_world},
                {"ompi_mpi_comm_null", &mpi_handles.comm_null},
                {"ompi_request_null", &mpi_handles.request_null},
                {"ompi_mpi_info_null", &mpi_handles.info_null},
                {"ompi_mpi_errors_return", &mpi_handles.errors_return},
                {"ompi_mpi_float", &mpi_handles.type_float},
                {"ompi_mpi_byte", &mpi_handles.type_byte},
                {"ompi_mpi_op_sum", &mpi_handles.op_sum},
                {"ompi_mpi_op_max", &mpi_handles.op_max})

#endif
