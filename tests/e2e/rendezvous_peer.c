// One rank of a TCP rendezvous, for tests across network namespaces
// (tests/e2e/rendezvous_netns.sh):
//   rendezvous_peer RANK WORLD HOST PORT TOKEN TIMEOUT_SECONDS
// Rank 0 serves a 128-byte id derived from TOKEN; every rank prints the id
// it ends with as hex on stdout, or the error on stderr and exits 1.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/rendezvous.h"

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: rendezvous_peer RANK WORLD HOST PORT TOKEN TIMEOUT_SECONDS\n");
        return 2;
    }
    const RendezvousConfig config = {
        .rank = atoi(argv[1]),
        .world_size = atoi(argv[2]),
        .host = argv[3],
        .port = atoi(argv[4]),
        .token = argv[5],
        .timeout_seconds = atof(argv[6]),
    };
    uint8_t id[128] = {0};
    if (config.rank == 0) {
        uint32_t hash = 2166136261u;  // FNV-1a of the token, stepped per byte
        for (const char *c = config.token; *c; c++) hash = (hash ^ (uint8_t)*c) * 16777619u;
        for (size_t i = 0; i < sizeof id; i++) id[i] = (uint8_t)((hash = hash * 16777619u + 1) >> 24);
    }
    ErrorMessage err = {{0}};
    if (rendezvous_share(&config, id, sizeof id, &err) != 0) {
        fprintf(stderr, "rank %d: %s\n", config.rank, err.text);
        return 1;
    }
    for (size_t i = 0; i < sizeof id; i++) printf("%02x", id[i]);
    printf("\n");
    return 0;
}
