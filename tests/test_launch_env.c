// Tests of launch environment detection: each launcher's variables (OpenMPI,
// torchrun style, SLURM), which one wins when several are present,
// incomplete and inconsistent environments (the message names the
// variables), SLURM host lists, and --devices / --num-nodes checks.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "dist/launch_env.h"

// Detects from a NULL-terminated list of "NAME=VALUE".
static int detect(LaunchEnv *env, ErrorMessage *err, char **envp) {
    memset(err, 0, sizeof *err);
    return launch_env_detect(envp, env, err);
}

static void expect_error(char **envp, const char *fragment) {
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, envp), -1);
    if (!strstr(err.text, fragment)) fail_msg("'%s' lacks '%s'", err.text, fragment);
}

static void test_no_launcher_is_one_process(void **state) {
    (void)state;
    char *envp[] = {"HOME=/root", "PATH=/usr/bin", NULL};
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, envp), 0);
    assert_int_equal(env.kind, LAUNCH_NONE);
    assert_int_equal(env.world_size, 1);
    assert_int_equal(env.rank, 0);
    assert_int_equal(env.num_nodes, 1);
    assert_int_equal(launch_env_detect(NULL, &env, &err), 0);  // an empty environment
}

static void test_openmpi(void **state) {
    (void)state;
    char *envp[] = {"OMPI_COMM_WORLD_SIZE=8", "OMPI_COMM_WORLD_RANK=5",
                    "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL};
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, envp), 0);
    assert_int_equal(env.kind, LAUNCH_OPENMPI);
    assert_int_equal(env.world_size, 8);
    assert_int_equal(env.rank, 5);
    assert_int_equal(env.local_rank, 1);
    assert_int_equal(env.local_world_size, 4);
    assert_int_equal(env.num_nodes, 2);
    assert_int_equal(env.node_rank, 1);
}

static void test_torchrun(void **state) {
    (void)state;
    char *envp[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                    "GROUP_RANK=1", "MASTER_ADDR=node-a", "MASTER_PORT=29500",
                    "TORCHELASTIC_RUN_ID=abc", "TORCHELASTIC_RESTART_COUNT=2", NULL};
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, envp), 0);
    assert_int_equal(env.kind, LAUNCH_TORCHRUN);
    assert_int_equal(env.rank, 3);
    assert_int_equal(env.world_size, 4);
    assert_int_equal(env.local_rank, 1);
    assert_int_equal(env.local_world_size, 2);
    assert_int_equal(env.num_nodes, 2);
    assert_int_equal(env.node_rank, 1);
    assert_string_equal(env.master_addr, "node-a");
    assert_int_equal(env.master_port, 29500);
    // A restart is another run: its token differs.
    assert_string_equal(env.run_token, "torchrun-abc.2");
}

static void test_slurm(void **state) {
    (void)state;
    char *envp[] = {"SLURM_JOB_ID=4242",         "SLURM_STEP_ID=0",
                    "SLURM_PROCID=6",            "SLURM_NTASKS=8",
                    "SLURM_STEP_NUM_TASKS=8",    "SLURM_LOCALID=2",
                    "SLURM_NODEID=1",            "SLURM_STEP_NUM_NODES=2",
                    "SLURM_STEP_TASKS_PER_NODE=4(x2)", "SLURM_CPUS_PER_TASK=6",
                    "SLURM_STEP_NODELIST=gpu[07-08]", NULL};
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, envp), 0);
    assert_int_equal(env.kind, LAUNCH_SLURM);
    assert_int_equal(env.rank, 6);
    assert_int_equal(env.world_size, 8);
    assert_int_equal(env.local_rank, 2);
    assert_int_equal(env.local_world_size, 4);
    assert_int_equal(env.node_rank, 1);
    assert_int_equal(env.num_nodes, 2);
    assert_int_equal(env.cpus_per_task, 6);
    assert_string_equal(env.master_addr, "gpu07");
    assert_int_equal(env.master_port, 15000 + 4242);
    assert_string_equal(env.run_token, "slurm-4242.0.0");
}

static void test_slurm_master_overrides(void **state) {
    (void)state;
    char *envp[] = {"SLURM_JOB_ID=1",  "SLURM_STEP_ID=3",   "SLURM_PROCID=0",
                    "SLURM_NTASKS=2",  "SLURM_LOCALID=0",   "SLURM_NODEID=0",
                    "SLURM_NNODES=1",  "SLURM_NODELIST=a1", "MASTER_ADDR=10.0.0.9",
                    "MASTER_PORT=4000", NULL};
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, envp), 0);
    assert_int_equal(env.local_world_size, 2);  // no tasks-per-node: world / nodes
    assert_string_equal(env.master_addr, "10.0.0.9");
    assert_int_equal(env.master_port, 4000);
}

// A batch script sees SLURM_PROCID and SLURM_NTASKS but is one process.
static void test_slurm_batch_script_is_not_a_rank(void **state) {
    (void)state;
    char *envp[] = {"SLURM_JOB_ID=77", "SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_LOCALID=0",
                    "SLURM_NODEID=0", "SLURM_NNODES=2", NULL};
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, envp), 0);
    assert_int_equal(env.kind, LAUNCH_NONE);
    assert_int_equal(env.world_size, 1);
}

// mpirun inside a SLURM allocation, or torchrun inside one: the launcher
// of this very process wins.
static void test_precedence(void **state) {
    (void)state;
    char *mpi_in_slurm[] = {"SLURM_STEP_ID=0",        "SLURM_PROCID=0",
                            "SLURM_NTASKS=1",         "SLURM_LOCALID=0",
                            "SLURM_NODEID=0",         "SLURM_NNODES=1",
                            "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=1",
                            "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    LaunchEnv env;
    ErrorMessage err;
    assert_int_equal(detect(&env, &err, mpi_in_slurm), 0);
    assert_int_equal(env.kind, LAUNCH_OPENMPI);
    assert_int_equal(env.rank, 1);
    char *torchrun_in_slurm[] = {"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1",
                                 "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NNODES=1",
                                 "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                                 "MASTER_ADDR=h", "MASTER_PORT=1234", NULL};
    assert_int_equal(detect(&env, &err, torchrun_in_slurm), 0);
    assert_int_equal(env.kind, LAUNCH_TORCHRUN);
    assert_int_equal(env.world_size, 2);
}

static void test_incomplete_environments(void **state) {
    (void)state;
    char *no_world[] = {"RANK=0", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", NULL};
    expect_error(no_world, "WORLD_SIZE is not set");
    char *no_local[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    expect_error(no_local, "LOCAL_RANK is not set");
    char *no_master[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", NULL};
    expect_error(no_master, "needs MASTER_ADDR and MASTER_PORT");
    char *mpi_no_rank[] = {"OMPI_COMM_WORLD_SIZE=2", NULL};
    expect_error(mpi_no_rank, "OMPI_COMM_WORLD_RANK is not set");
    char *slurm_no_tasks[] = {"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0",
                              "SLURM_NODEID=0", "SLURM_NNODES=1", NULL};
    expect_error(slurm_no_tasks, "SLURM_STEP_NUM_TASKS is not set (nor SLURM_NTASKS");
}

static void test_inconsistent_environments(void **state) {
    (void)state;
    char *not_number[] = {"RANK=one", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2",
                          "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    expect_error(not_number, "RANK='one' is not a whole number");
    char *negative[] = {"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=-1",
                        "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    expect_error(negative, "OMPI_COMM_WORLD_RANK='-1'");
    char *rank_outside[] = {"RANK=4", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2",
                            "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    expect_error(rank_outside, "rank 4 is outside the world of 4 ranks");
    char *local_outside[] = {"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2",
                             "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    expect_error(local_outside, "local rank 2 is outside the 2 processes of the node");
    char *uneven[] = {"OMPI_COMM_WORLD_SIZE=5", "OMPI_COMM_WORLD_RANK=0",
                      "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    expect_error(uneven, "do not fill whole nodes");
    char *group[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                     "GROUP_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    expect_error(group, "GROUP_RANK=0 but RANK=3");
    char *port[] = {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
                    "MASTER_PORT=70000", NULL};
    expect_error(port, "MASTER_PORT=70000 is not a port");
    char *nodes[] = {"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_NNODES=3", "SLURM_TASKS_PER_NODE=2(x2)", NULL};
    expect_error(nodes, "3 nodes, but 4 ranks at 2 per node make 2");
    char *uneven_slurm[] = {"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=5",
                            "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NNODES=2",
                            "SLURM_TASKS_PER_NODE=3,2", NULL};
    expect_error(uneven_slurm, "different numbers of tasks");
}

static void test_slurm_host_lists(void **state) {
    (void)state;
    const char *cases[][2] = {
        {"node1", "node1"},           {"n1,n2", "n1"},
        {"gpu[07-09,12],cpu1", "gpu07"}, {"a[3,5-7]", "a3"},
        {"rack[1-2]-node[001-004]", "rack1-node001"}, {"x[10-11]y,z", "x10y"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[64];
        ErrorMessage err;
        assert_int_equal(slurm_first_host(cases[i][0], host, sizeof host, &err), 0);
        assert_string_equal(host, cases[i][1]);
    }
    char host[8];
    ErrorMessage err;
    assert_int_equal(slurm_first_host("n[1-2", host, sizeof host, &err), -1);
    assert_non_null(strstr(err.text, "unclosed"));
    assert_int_equal(slurm_first_host("verylonghostname", host, sizeof host, &err), -1);
    assert_int_equal(slurm_first_host("", host, sizeof host, &err), -1);
}

static void test_devices_and_nodes_against_launch(void **state) {
    (void)state;
    LaunchEnv none = {.kind = LAUNCH_NONE, .world_size = 1, .local_world_size = 1,
                      .num_nodes = 1};
    int devices = 0, nodes = 0;
    ErrorMessage err;
    assert_int_equal(launch_env_check_devices(&none, -1, -1, &devices, &nodes, &err), 0);
    assert_int_equal(devices, 1);
    assert_int_equal(nodes, 1);
    assert_int_equal(launch_env_check_devices(&none, 2, -1, &devices, &nodes, &err), -1);
    assert_non_null(strstr(err.text, "mpirun -np N"));
    assert_int_equal(launch_env_check_devices(&none, 1, 2, &devices, &nodes, &err), -1);

    LaunchEnv mpi = {.kind = LAUNCH_OPENMPI, .world_size = 6, .local_world_size = 3,
                     .num_nodes = 2};
    assert_int_equal(launch_env_check_devices(&mpi, -1, -1, &devices, &nodes, &err), 0);
    assert_int_equal(devices, 3);
    assert_int_equal(nodes, 2);
    assert_int_equal(launch_env_check_devices(&mpi, 3, 2, &devices, &nodes, &err), 0);
    assert_int_equal(launch_env_check_devices(&mpi, 2, -1, &devices, &nodes, &err), -1);
    assert_non_null(strstr(err.text, "--devices 2, but OpenMPI (mpirun) started 3"));
    assert_int_equal(launch_env_check_devices(&mpi, -1, 1, &devices, &nodes, &err), -1);
    assert_non_null(strstr(err.text, "--num-nodes 1, but OpenMPI (mpirun) runs on 2 node(s)"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_launcher_is_one_process),
        cmocka_unit_test(test_openmpi),
        cmocka_unit_test(test_torchrun),
        cmocka_unit_test(test_slurm),
        cmocka_unit_test(test_slurm_master_overrides),
        cmocka_unit_test(test_slurm_batch_script_is_not_a_rank),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_incomplete_environments),
        cmocka_unit_test(test_inconsistent_environments),
        cmocka_unit_test(test_slurm_host_lists),
        cmocka_unit_test(test_devices_and_nodes_against_launch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
