// Launch environment detection (see launch_env.h).
#include "dist/launch_env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// SLURM without MASTER_PORT: a port from the job id, so that concurrent jobs
// sharing a node rarely collide (MASTER_PORT overrides it).
#define SLURM_PORT_BASE 15000
#define SLURM_PORT_SPAN 20000

static const char *env_get(char *const *envp, const char *name) {
    const size_t length = strlen(name);
    for (char *const *entry = envp; entry && *entry; entry++)
        if (strncmp(*entry, name, length) == 0 && (*entry)[length] == '=')
            return *entry + length + 1;
    return NULL;
}

// The first of two names that is set (SLURM's step-level names first).
static const char *env_first(char *const *envp, const char *name, const char *fallback,
                             const char **used) {
    const char *value = env_get(envp, name);
    *used = name;
    if (!value && fallback) {
        value = env_get(envp, fallback);
        *used = fallback;
    }
    return value;
}

// A whole number >= 0 from variable `name` with value `text`.
static int parse_count(const char *name, const char *text, int *value, ErrorMessage *err) {
    char *end = NULL;
    errno = 0;
    const long number = text ? strtol(text, &end, 10) : -1;
    if (!text || end == text || *end != '\0' || errno || number < 0 || number > INT_MAX)
        return error_set(err, "%s='%s' is not a whole number >= 0", name, text ? text : "");
    *value = (int)number;
    return 0;
}

// Reads a required variable (or its fallback) as a count.
static int require_count(char *const *envp, const char *launcher, const char *name,
                         const char *fallback, int *value, ErrorMessage *err) {
    const char *used;
    const char *text = env_first(envp, name, fallback, &used);
    if (!text)
        return error_set(err, "%s: %s is not set%s%s", launcher, name,
                         fallback ? " (nor " : "", fallback ? fallback : "");
    if (parse_count(used, text, value, err)) return error_prefix(err, "%s", launcher);
    return 0;
}

// MASTER_ADDR / MASTER_PORT when set (they override a launcher's own).
static int read_master(char *const *envp, LaunchEnv *env, ErrorMessage *err) {
    const char *addr = env_get(envp, "MASTER_ADDR");
    if (addr && snprintf(env->master_addr, sizeof env->master_addr, "%s", addr) >=
                    (int)sizeof env->master_addr)
        return error_set(err, "MASTER_ADDR is longer than %zu characters",
                         sizeof env->master_addr - 1);
    const char *port = env_get(envp, "MASTER_PORT");
    if (port) {
        if (parse_count("MASTER_PORT", port, &env->master_port, err)) return -1;
        if (env->master_port < 1 || env->master_port > 65535)
            return error_set(err, "MASTER_PORT=%s is not a port (1..65535)", port);
    }
    return 0;
}

static int detect_openmpi(char *const *envp, LaunchEnv *env, ErrorMessage *err) {
    const char *launcher = "OpenMPI launch";
    env->kind = LAUNCH_OPENMPI;
    if (require_count(envp, launcher, "OMPI_COMM_WORLD_SIZE", NULL, &env->world_size, err) ||
        require_count(envp, launcher, "OMPI_COMM_WORLD_RANK", NULL, &env->rank, err) ||
        require_count(envp, launcher, "OMPI_COMM_WORLD_LOCAL_RANK", NULL, &env->local_rank,
                      err) ||
        require_count(envp, launcher, "OMPI_COMM_WORLD_LOCAL_SIZE", NULL,
                      &env->local_world_size, err))
        return -1;
    env->num_nodes = env->local_world_size ? env->world_size / env->local_world_size : 0;
    env->node_rank = env->local_world_size ? env->rank / env->local_world_size : 0;
    return 0;
}

static int detect_torchrun(char *const *envp, LaunchEnv *env, ErrorMessage *err) {
    const char *launcher = "torchrun-style launch (RANK, WORLD_SIZE, LOCAL_RANK, "
                           "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)";
    env->kind = LAUNCH_TORCHRUN;
    if (require_count(envp, launcher, "RANK", NULL, &env->rank, err) ||
        require_count(envp, launcher, "WORLD_SIZE", NULL, &env->world_size, err) ||
        require_count(envp, launcher, "LOCAL_RANK", NULL, &env->local_rank, err) ||
        require_count(envp, launcher, "LOCAL_WORLD_SIZE", NULL, &env->local_world_size, err))
        return -1;
    env->num_nodes = env->local_world_size ? env->world_size / env->local_world_size : 0;
    env->node_rank = env->local_world_size ? env->rank / env->local_world_size : 0;
    const char *group = env_get(envp, "GROUP_RANK");
    if (group) {
        int node = 0;
        if (parse_count("GROUP_RANK", group, &node, err)) return -1;
        if (env->local_world_size && node != env->node_rank)
            return error_set(err, "GROUP_RANK=%d but RANK=%d with LOCAL_WORLD_SIZE=%d is on "
                                  "node %d", node, env->rank, env->local_world_size,
                             env->node_rank);
    }
    if (env->world_size > 1 && (!env_get(envp, "MASTER_ADDR") || !env_get(envp, "MASTER_PORT")))
        return error_set(err, "torchrun-style launch with WORLD_SIZE=%d needs MASTER_ADDR and "
                              "MASTER_PORT (rank 0's host and a free port)", env->world_size);
    const char *run_id = env_get(envp, "TORCHELASTIC_RUN_ID");
    const char *restarts = env_get(envp, "TORCHELASTIC_RESTART_COUNT");
    const char *own = env_get(envp, "LTC_RUN_TOKEN");
    if (run_id)
        snprintf(env->run_token, sizeof env->run_token, "torchrun-%s.%s", run_id,
                 restarts ? restarts : "0");
    else if (own)
        snprintf(env->run_token, sizeof env->run_token, "%s", own);
    return 0;
}

// Processes per node from SLURM's "4(x2),4" form; every node must have the
// same number.
static int slurm_tasks_per_node(const char *name, const char *text, int *tasks,
                                ErrorMessage *err) {
    int common = -1;
    const char *cursor = text;
    while (*cursor) {
        char *end = NULL;
        const long count = strtol(cursor, &end, 10);
        if (end == cursor || count < 1 || count > INT_MAX)
            return error_set(err, "%s='%s' is not a SLURM task count list", name, text);
        if (common >= 0 && count != common)
            return error_set(err, "%s='%s': the nodes run different numbers of tasks; every "
                                  "node must run the same number", name, text);
        common = (int)count;
        cursor = end;
        if (*cursor == '(') {  // "(xN)": repeated on N nodes
            cursor = strchr(cursor, ')');
            if (!cursor) return error_set(err, "%s='%s': unclosed '('", name, text);
            cursor++;
        }
        if (*cursor == ',') cursor++;
        else if (*cursor)
            return error_set(err, "%s='%s' is not a SLURM task count list", name, text);
    }
    if (common < 0) return error_set(err, "%s is empty", name);
    *tasks = common;
    return 0;
}

static int detect_slurm(char *const *envp, LaunchEnv *env, ErrorMessage *err) {
    const char *launcher = "SLURM launch (srun)";
    env->kind = LAUNCH_SLURM;
    if (require_count(envp, launcher, "SLURM_PROCID", NULL, &env->rank, err) ||
        require_count(envp, launcher, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", &env->world_size,
                      err) ||
        require_count(envp, launcher, "SLURM_LOCALID", NULL, &env->local_rank, err) ||
        require_count(envp, launcher, "SLURM_NODEID", NULL, &env->node_rank, err) ||
        require_count(envp, launcher, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", &env->num_nodes,
                      err))
        return -1;
    const char *used;
    const char *per_node = env_first(envp, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                                     &used);
    if (per_node) {
        if (slurm_tasks_per_node(used, per_node, &env->local_world_size, err)) return -1;
    } else if (env->num_nodes > 0) {
        env->local_world_size = env->world_size / env->num_nodes;
    }
    const char *cpus = env_get(envp, "SLURM_CPUS_PER_TASK");
    if (cpus && parse_count("SLURM_CPUS_PER_TASK", cpus, &env->cpus_per_task, err)) return -1;
    const char *nodelist = env_first(envp, "SLURM_STEP_NODELIST", "SLURM_NODELIST", &used);
    if (!nodelist) nodelist = env_get(envp, "SLURM_JOB_NODELIST");
    if (nodelist && slurm_first_host(nodelist, env->master_addr, sizeof env->master_addr, err))
        return error_prefix(err, "%s", used);
    const char *job = env_get(envp, "SLURM_JOB_ID");
    const char *step = env_get(envp, "SLURM_STEP_ID");
    if (!step) step = env_get(envp, "SLURM_STEPID");
    const char *restarts = env_get(envp, "SLURM_RESTART_COUNT");
    if (job) {
        snprintf(env->run_token, sizeof env->run_token, "slurm-%s.%s.%s", job, step,
                 restarts ? restarts : "0");
        env->master_port = SLURM_PORT_BASE + (int)(strtoul(job, NULL, 10) % SLURM_PORT_SPAN);
    }
    return 0;
}

// Rank inside the world, local rank inside the node, whole nodes.
static int check_consistent(const LaunchEnv *env, ErrorMessage *err) {
    const char *name = launch_kind_name(env->kind);
    if (env->world_size < 1) return error_set(err, "%s: world size %d", name, env->world_size);
    if (env->rank >= env->world_size)
        return error_set(err, "%s: rank %d is outside the world of %d ranks", name, env->rank,
                         env->world_size);
    if (env->local_world_size < 1 || env->local_world_size > env->world_size)
        return error_set(err, "%s: %d processes per node in a world of %d", name,
                         env->local_world_size, env->world_size);
    if (env->local_rank >= env->local_world_size)
        return error_set(err, "%s: local rank %d is outside the %d processes of the node", name,
                         env->local_rank, env->local_world_size);
    if (env->world_size % env->local_world_size != 0)
        return error_set(err, "%s: %d ranks do not fill whole nodes of %d processes; every node "
                              "must run the same number", name, env->world_size,
                         env->local_world_size);
    const int nodes = env->world_size / env->local_world_size;
    if (env->num_nodes != nodes)
        return error_set(err, "%s: %d nodes, but %d ranks at %d per node make %d", name,
                         env->num_nodes, env->world_size, env->local_world_size, nodes);
    if (env->node_rank >= env->num_nodes)
        return error_set(err, "%s: node %d is outside the %d nodes", name, env->node_rank,
                         env->num_nodes);
    return 0;
}

int launch_env_detect(char *const *envp, LaunchEnv *env, ErrorMessage *err) {
    *env = (LaunchEnv){.kind = LAUNCH_NONE, .world_size = 1, .local_world_size = 1,
                       .num_nodes = 1};
    int status = 0;
    if (env_get(envp, "OMPI_COMM_WORLD_SIZE") || env_get(envp, "OMPI_COMM_WORLD_RANK"))
        status = detect_openmpi(envp, env, err);
    else if (env_get(envp, "WORLD_SIZE") || env_get(envp, "RANK"))
        status = detect_torchrun(envp, env, err);
    else if ((env_get(envp, "SLURM_STEP_ID") || env_get(envp, "SLURM_STEPID")) &&
             env_get(envp, "SLURM_PROCID"))
        status = detect_slurm(envp, env, err);
    if (status == 0) status = read_master(envp, env, err);
    if (status == 0 && env->kind != LAUNCH_NONE) status = check_consistent(env, err);
    return status;
}

const char *launch_kind_name(LaunchKind kind) {
    switch (kind) {
    case LAUNCH_OPENMPI: return "OpenMPI (mpirun)";
    case LAUNCH_TORCHRUN: return "torchrun-style environment";
    case LAUNCH_SLURM: return "SLURM (srun)";
    default: return "none";
    }
}

int launch_env_check_devices(const LaunchEnv *env, int devices, int num_nodes,
                             int *devices_out, int *num_nodes_out, ErrorMessage *err) {
    if (env->kind == LAUNCH_NONE) {
        // (--num-nodes named only where given: embed has no such option)
        if (devices > 1 || num_nodes > 1) {
            char nodes[32] = "";
            if (num_nodes > 1) snprintf(nodes, sizeof nodes, " --num-nodes %d", num_nodes);
            return error_set(err, "--devices %d%s: no launcher started several processes; "
                                  "start one process per device with mpirun -np N (CPU ranks), "
                                  "srun or torchrun (see docs/distributed.md)",
                             devices > 0 ? devices : 1, nodes);
        }
        *devices_out = 1;
        *num_nodes_out = 1;
        return 0;
    }
    const char *name = launch_kind_name(env->kind);
    if (devices > 0 && devices != env->local_world_size)
        return error_set(err, "--devices %d, but %s started %d process(es) on this node: one "
                              "process per device (or leave --devices auto)", devices, name,
                         env->local_world_size);
    if (num_nodes > 0 && num_nodes != env->num_nodes)
        return error_set(err, "--num-nodes %d, but %s runs on %d node(s) (or leave --num-nodes "
                              "auto)", num_nodes, name, env->num_nodes);
    *devices_out = env->local_world_size;
    *num_nodes_out = env->num_nodes;
    return 0;
}

// Appends text[0..length) to host; -1 when it does not fit.
static int host_append(char *host, size_t size, size_t *used, const char *text, size_t length) {
    if (*used + length >= size) return -1;
    memcpy(host + *used, text, length);
    *used += length;
    host[*used] = '\0';
    return 0;
}

int slurm_first_host(const char *nodelist, char *host, size_t size, ErrorMessage *err) {
    size_t used = 0;
    if (size == 0) return error_set(err, "no room for the host name");
    host[0] = '\0';
    const char *cursor = nodelist;
    // Literal text and [..] groups up to the first comma outside brackets;
    // each group contributes its first number (zero padding kept).
    while (*cursor && *cursor != ',') {
        if (*cursor == '[') {
            const char *close = strchr(cursor, ']');
            if (!close) return error_set(err, "'%s': unclosed '['", nodelist);
            const size_t digits = strspn(cursor + 1, "0123456789");
            if (digits == 0 || cursor + 1 + digits > close)
                return error_set(err, "'%s': a bracket does not start with a number", nodelist);
            if (host_append(host, size, &used, cursor + 1, digits))
                return error_set(err, "'%s': host name too long", nodelist);
            cursor = close + 1;
            continue;
        }
        const size_t literal = strcspn(cursor, "[,");
        if (host_append(host, size, &used, cursor, literal))
            return error_set(err, "'%s': host name too long", nodelist);
        cursor += literal;
    }
    if (used == 0) return error_set(err, "'%s' has no host name", nodelist);
    return 0;
}
