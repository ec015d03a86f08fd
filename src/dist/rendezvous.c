// TCP rendezvous (see rendezvous.h).
//
// Wire format, integers u32 little endian:
//   hello (peer -> rank 0): magic[8], rank, world_size, payload_size,
//                           token_length, token
//   answer (rank 0 -> peer): magic[8], status, token_length, token,
//                           text_length, text (status != OK: why), then
//                           payload_size, payload (status OK only)
#include "dist/rendezvous.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/cpu.h"

static const char rendezvous_magic[8] = {'L', 'T', 'C', 'R', 'D', 'V', '1', 0};

typedef enum AnswerStatus {
    ANSWER_OK = 0,
    ANSWER_OTHER_RUN = 1,     // token differs
    ANSWER_MISMATCH = 2,      // world size or payload size differs
    ANSWER_BAD_RANK = 3,      // outside the world or already arrived
    ANSWER_INCOMPLETE = 4,    // rank 0 gave up: not every rank arrived
} AnswerStatus;

// A peer that sends nothing must not hold rank 0 up for long.
#define HELLO_SECONDS 2.0
#define RETRY_SECONDS 0.2
// Room for rank 0's explanations (tokens are at most 255 bytes each).
#define ANSWER_TEXT 1024

// ---- bounded socket I/O ---------------------------------------------------------------

static int wait_ready(int fd, short events, double deadline) {
    for (;;) {
        const double left = deadline - time_now();
        if (left <= 0) return -1;
        struct pollfd poller = {.fd = fd, .events = events};
        const int ready = poll(&poller, 1, (int)(left * 1000) + 1);
        if (ready > 0) return 0;
        if (ready < 0 && errno != EINTR) return -1;
    }
}

// 0, or -1 (errno ETIMEDOUT on the deadline, ECONNRESET when closed early).
static int write_all(int fd, const void *data, size_t size, double deadline) {
    const uint8_t *bytes = data;
    while (size > 0) {
        if (wait_ready(fd, POLLOUT, deadline)) return errno = ETIMEDOUT, -1;
        const ssize_t sent = send(fd, bytes, size, MSG_NOSIGNAL);
        if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (sent <= 0) return -1;
        bytes += sent;
        size -= (size_t)sent;
    }
    return 0;
}

static int read_all(int fd, void *data, size_t size, double deadline) {
    uint8_t *bytes = data;
    while (size > 0) {
        if (wait_ready(fd, POLLIN, deadline)) return errno = ETIMEDOUT, -1;
        const ssize_t got = recv(fd, bytes, size, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got == 0) return errno = ECONNRESET, -1;
        if (got < 0) return -1;
        bytes += got;
        size -= (size_t)got;
    }
    return 0;
}

static void put_u32(uint8_t *out, uint32_t value) {
    for (int i = 0; i < 4; i++) out[i] = (uint8_t)(value >> (8 * i));
}

static uint32_t get_u32(const uint8_t *in) {
    return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 |
           (uint32_t)in[3] << 24;
}

static int write_u32(int fd, uint32_t value, double deadline) {
    uint8_t bytes[4];
    put_u32(bytes, value);
    return write_all(fd, bytes, 4, deadline);
}

static int read_u32(int fd, uint32_t *value, double deadline) {
    uint8_t bytes[4];
    if (read_all(fd, bytes, 4, deadline)) return -1;
    *value = get_u32(bytes);
    return 0;
}

// A length-prefixed string of at most `capacity - 1` bytes, 0-terminated.
static int read_text(int fd, char *text, size_t capacity, double deadline) {
    uint32_t length = 0;
    if (read_u32(fd, &length, deadline)) return -1;
    if (length >= capacity) return errno = EPROTO, -1;
    if (read_all(fd, text, length, deadline)) return -1;
    text[length] = '\0';
    return 0;
}

static int write_text(int fd, const char *text, double deadline) {
    const size_t length = strlen(text);
    if (write_u32(fd, (uint32_t)length, deadline)) return -1;
    return write_all(fd, text, length, deadline);
}

// ---- rank 0 -----------------------------------------------------------------------------

typedef struct Hello {
    uint32_t rank, world_size, payload_size;
    char token[RENDEZVOUS_MAX_TOKEN + 1];
} Hello;

static int read_hello(int fd, Hello *hello, double deadline) {
    char magic[8];
    if (read_all(fd, magic, sizeof magic, deadline) || memcmp(magic, rendezvous_magic, 8))
        return -1;
    return read_u32(fd, &hello->rank, deadline) || read_u32(fd, &hello->world_size, deadline) ||
                   read_u32(fd, &hello->payload_size, deadline) ||
                   read_text(fd, hello->token, sizeof hello->token, deadline)
               ? -1
               : 0;
}

// The answer header: magic, status, rank 0's token and why (for refusals).
static int write_answer(int fd, AnswerStatus status, const char *token, const char *why,
                        double deadline) {
    if (write_all(fd, rendezvous_magic, sizeof rendezvous_magic, deadline) ||
        write_u32(fd, (uint32_t)status, deadline) || write_text(fd, token, deadline) ||
        write_text(fd, why, deadline))
        return -1;
    return 0;
}

// Listening socket on every interface (IPv6 dual-stack, else IPv4).
static int listen_on(int port, ErrorMessage *err) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int family = AF_INET6;
    if (fd < 0) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        family = AF_INET;
    }
    if (fd < 0) return error_set(err, "rendezvous: socket: %s", strerror(errno));
    const int on = 1, off = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // past runs' TIME_WAIT only
    int status;
    if (family == AF_INET6) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        struct sockaddr_in6 address = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                                       .sin6_addr = in6addr_any};
        status = bind(fd, (struct sockaddr *)&address, sizeof address);
    } else {
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                      .sin_addr.s_addr = htonl(INADDR_ANY)};
        status = bind(fd, (struct sockaddr *)&address, sizeof address);
    }
    if (status != 0) {
        const int error = errno;
        close(fd);
        if (error == EADDRINUSE)
            return error_set(err, "rendezvous: port %d is in use on this host (another run, or "
                                  "a rank 0 of an earlier run still alive?): choose another "
                                  "MASTER_PORT or end that program", port);
        return error_set(err, "rendezvous: cannot listen on port %d: %s", port, strerror(error));
    }
    if (listen(fd, 128) != 0) {
        const int error = errno;
        close(fd);
        return error_set(err, "rendezvous: listen on port %d: %s", port, strerror(error));
    }
    return fd;
}

// Checks one peer's hello; ANSWER_OK when it belongs to this run and is new.
static AnswerStatus judge_hello(const RendezvousConfig *config, size_t size, const Hello *hello,
                                const int *peers, char *why, size_t why_size) {
    if (strcmp(hello->token, config->token) != 0) {
        snprintf(why, why_size, "rank 0 on port %d serves run '%s', not '%s'", config->port,
                 config->token, hello->token);
        return ANSWER_OTHER_RUN;
    }
    if (hello->world_size != (uint32_t)config->world_size || hello->payload_size != size) {
        snprintf(why, why_size, "rank 0 has world size %d and payload %zu bytes, rank %u %u "
                 "and %u", config->world_size, size, hello->rank, hello->world_size,
                 hello->payload_size);
        return ANSWER_MISMATCH;
    }
    if (hello->rank == 0 || hello->rank >= (uint32_t)config->world_size ||
        peers[hello->rank] >= 0) {
        snprintf(why, why_size, "rank %u %s", hello->rank,
                 hello->rank == 0 || hello->rank >= (uint32_t)config->world_size
                     ? "is not a peer rank of this world"
                     : "arrived twice");
        return ANSWER_BAD_RANK;
    }
    return ANSWER_OK;
}

// "2, 5, 7" (the first ones) of the ranks that did not arrive.
static void list_missing(const int *peers, int world_size, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int r = 1; r < world_size && used + 16 < size; r++)
        if (peers[r] < 0) used += (size_t)snprintf(out + used, size - used, "%s%d",
                                                   used ? ", " : "", r);
}

static void close_peers(int *peers, int world_size) {
    for (int r = 1; r < world_size; r++)
        if (peers[r] >= 0) close(peers[r]);
}

static int serve(const RendezvousConfig *config, const void *payload, size_t size,
                 ErrorMessage *err) {
    const int listener = listen_on(config->port, err);
    if (listener < 0) return -1;
    int *peers = malloc((size_t)config->world_size * sizeof *peers);
    if (!peers) {
        close(listener);
        return error_set(err, "rendezvous: out of memory");
    }
    for (int r = 0; r < config->world_size; r++) peers[r] = -1;
    const double deadline = time_now() + config->timeout_seconds;
    int arrived = 1, refused = 0;
    char why[ANSWER_TEXT / 2] = "";
    while (arrived < config->world_size) {
        if (wait_ready(listener, POLLIN, deadline)) break;
        const int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        Hello hello;
        const double hello_deadline = time_now() + HELLO_SECONDS < deadline
                                          ? time_now() + HELLO_SECONDS
                                          : deadline;
        if (read_hello(fd, &hello, hello_deadline)) {
            close(fd);  // not a peer of ours (or too slow): ignore it
            continue;
        }
        const AnswerStatus status = judge_hello(config, size, &hello, peers, why, sizeof why);
        if (status != ANSWER_OK) {
            refused++;
            write_answer(fd, status, config->token, why, hello_deadline);
            close(fd);
            continue;
        }
        peers[hello.rank] = fd;
        arrived++;
    }
    close(listener);
    int result = 0;
    if (arrived < config->world_size) {
        char missing[200];
        list_missing(peers, config->world_size, missing, sizeof missing);
        char reason[ANSWER_TEXT];
        snprintf(reason, sizeof reason,
                 "rank 0 gave up after %g s: %d of %d ranks arrived on port %d, missing ranks "
                 "%s%s%s", config->timeout_seconds, arrived, config->world_size, config->port,
                 missing, refused ? "; refused peers, last: " : "", refused ? why : "");
        const double answer_deadline = time_now() + HELLO_SECONDS;
        for (int r = 1; r < config->world_size; r++)
            if (peers[r] >= 0)
                write_answer(peers[r], ANSWER_INCOMPLETE, config->token, reason, answer_deadline);
        result = error_set(err, "rendezvous: %s", reason);
    } else {
        const double answer_deadline = time_now() + config->timeout_seconds;
        for (int r = 1; r < config->world_size && result == 0; r++)
            if (write_answer(peers[r], ANSWER_OK, config->token, "", answer_deadline) ||
                write_u32(peers[r], (uint32_t)size, answer_deadline) ||
                write_all(peers[r], payload, size, answer_deadline))
                result = error_set(err, "rendezvous: sending to rank %d failed: %s", r,
                                   strerror(errno));
    }
    close_peers(peers, config->world_size);
    free(peers);
    return result;
}

// ---- the other ranks --------------------------------------------------------------------

// A connected socket to host:port, or -1 with last_error set (errno text).
static int connect_once(const RendezvousConfig *config, double deadline, char *last_error,
                        size_t size) {
    char port[16];
    snprintf(port, sizeof port, "%d", config->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *addresses = NULL;
    const int lookup = getaddrinfo(config->host, port, &hints, &addresses);
    if (lookup != 0) {
        snprintf(last_error, size, "cannot resolve '%s': %s", config->host,
                 gai_strerror(lookup));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = addresses; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int error = 0;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            error = errno;
            if (error == EINPROGRESS) {
                socklen_t length = sizeof error;
                error = wait_ready(fd, POLLOUT, deadline) ? ETIMEDOUT : 0;
                if (!error) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
            }
        }
        if (error) {
            snprintf(last_error, size, "%s", strerror(error));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(addresses);
    return fd;
}

// One attempt on a connected socket: 0 with the payload, 1 to retry
// (refused by another run's rank 0, connection lost), -1 to give up.
static int ask(const RendezvousConfig *config, int fd, void *payload, size_t size,
               double deadline, char *last_error, size_t error_size, char *other_run,
               size_t other_run_size, ErrorMessage *err) {
    uint8_t header[8 + 16];
    memcpy(header, rendezvous_magic, 8);
    put_u32(header + 8, (uint32_t)config->rank);
    put_u32(header + 12, (uint32_t)config->world_size);
    put_u32(header + 16, (uint32_t)size);
    put_u32(header + 20, (uint32_t)strlen(config->token));
    char magic[8], token[RENDEZVOUS_MAX_TOKEN + 1], why[ANSWER_TEXT];
    uint32_t status = 0, payload_size = 0;
    if (write_all(fd, header, sizeof header, deadline) ||
        write_all(fd, config->token, strlen(config->token), deadline) ||
        read_all(fd, magic, sizeof magic, deadline) || memcmp(magic, rendezvous_magic, 8) ||
        read_u32(fd, &status, deadline) || read_text(fd, token, sizeof token, deadline) ||
        read_text(fd, why, sizeof why, deadline)) {
        snprintf(last_error, error_size, "connection to rank 0 lost: %s", strerror(errno));
        return 1;
    }
    if (status == ANSWER_OTHER_RUN || strcmp(token, config->token) != 0) {
        // Another run's rank 0: its payload is not ours. Ours may come later.
        snprintf(other_run, other_run_size, "%s:%d belongs to another run ('%s'; ours is '%s')",
                 config->host, config->port, token, config->token);
        snprintf(last_error, error_size, "%s", other_run);
        return 1;
    }
    if (status != ANSWER_OK) return error_set(err, "rendezvous: rank %d: %s", config->rank, why);
    if (read_u32(fd, &payload_size, deadline) || payload_size != size ||
        read_all(fd, payload, size, deadline)) {
        snprintf(last_error, error_size, "rank 0's payload was cut short or has the wrong size");
        return 1;
    }
    return 0;
}

static int fetch(const RendezvousConfig *config, void *payload, size_t size, ErrorMessage *err) {
    if (!config->host || !config->host[0])
        return error_set(err, "rendezvous: rank %d does not know rank 0's host (MASTER_ADDR)",
                         config->rank);
    const double deadline = time_now() + config->timeout_seconds;
    char last_error[512] = "no attempt", other_run[512] = "";
    while (time_now() < deadline) {
        const int fd = connect_once(config, deadline, last_error, sizeof last_error);
        if (fd >= 0) {
            // Rank 0 answers by its own deadline at the latest (possibly "gave
            // up"): wait a little longer than ours for that answer.
            const int status = ask(config, fd, payload, size, deadline + HELLO_SECONDS,
                                   last_error, sizeof last_error, other_run, sizeof other_run,
                                   err);
            close(fd);
            if (status <= 0) return status;
        }
        sleep_seconds(RETRY_SECONDS);
    }
    return error_set(err, "rendezvous: rank %d could not get the id from rank 0 at %s:%d "
                          "within %g s (last: %s%s%s); is rank 0 running, MASTER_ADDR/"
                          "MASTER_PORT right and the port open in the firewall?", config->rank,
                     config->host, config->port, config->timeout_seconds, last_error,
                     other_run[0] && strcmp(other_run, last_error) ? "; before: " : "",
                     other_run[0] && strcmp(other_run, last_error) ? other_run : "");
}

int rendezvous_share(const RendezvousConfig *config, void *payload, size_t size,
                     ErrorMessage *err) {
    if (config->world_size < 1 || config->rank < 0 || config->rank >= config->world_size)
        return error_set(err, "rendezvous: rank %d outside a world of %d", config->rank,
                         config->world_size);
    if (config->port < 1 || config->port > 65535)
        return error_set(err, "rendezvous: port %d is not a port (1..65535)", config->port);
    if (size == 0 || size > RENDEZVOUS_MAX_PAYLOAD)
        return error_set(err, "rendezvous: payload of %zu bytes (1..%d)", size,
                         RENDEZVOUS_MAX_PAYLOAD);
    if (!config->token || strlen(config->token) > RENDEZVOUS_MAX_TOKEN)
        return error_set(err, "rendezvous: the run token is missing or longer than %d bytes",
                         RENDEZVOUS_MAX_TOKEN);
    if (config->world_size == 1) return 0;
    return config->rank == 0 ? serve(config, payload, size, err)
                             : fetch(config, payload, size, err);
}
