// The CUDA emulation's thread model: a launch runs its grid block after
// block on the calling thread; the threads of a block are fibers (one small
// stack each, with a guard page below it; started by moving the stack
// pointer on x86-64, with makecontext / swapcontext elsewhere; switched with
// _setjmp / _longjmp, which save no signal mask and so make no system call:
// a launch of millions of threads stays quick) that run in thread order
// (odd blocks last to first) and switch only at a barrier: __syncthreads
// (every thread of the block) or a warp shuffle (the 32 lanes of a warp,
// whose values are exchanged when all have arrived). Blocks run in grid
// order (LTC_EMU_BLOCK_ORDER=reverse: last to first). Besides running the kernels it checks what a GPU
// would refuse or leave undefined: launch limits, dynamic shared memory over
// the kernel's allowance, a __syncthreads that not every thread reaches, a
// shuffle in divergent code or in a partial warp, a misaligned vector access
// (LTC_DEVICE_CHECK_ALIGNED) and a memory fault, each
// reported with the launch site, block and thread.
#undef _FORTIFY_SOURCE  // _longjmp between fiber stacks is what this file does
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <vector>

#include "cuda_emu.h"
#include "emu_log.h"
#include "emu_runtime.h"

namespace ltc_emu {
namespace {

enum class FiberState { kReady, kAtBarrier, kAtShuffle, kDone };

constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 128 * 1024;

struct Fiber {
    ucontext_t context;  // for its start
    jmp_buf resume;      // where it waits
    char *stack;  // kStackBytes usable, a guard page below
    FiberState state;
    int source;  // shuffle: the lane read
    size_t bytes;
    unsigned char offered[16], result[16];
};

struct Emulator {
    Fiber fibers[kMaxThreads];
    ThreadIndices indices[kMaxThreads];
    int threads;   // of the running block
    int current;   // the running fiber
    bool in_kernel;
    ucontext_t start;   // the scheduler, while a fiber starts
    jmp_buf scheduler;  // the scheduler, while a fiber runs
    const LaunchConfig *config;
    void (*run)(void *);
    void *call;
    std::vector<unsigned char> shared;  // dynamic shared memory
    char signal_stack[64 * 1024];
};

Emulator *emu;

[[noreturn]] void kernel_fail(const char *what) {
    const ThreadIndices &at = emu->indices[emu->current];
    fprintf(stderr,
            "cuda emulation: %s\n  in the kernel launched at %s:%d, block (%u,%u,%u) of "
            "(%u,%u,%u), thread (%u,%u,%u) of (%u,%u,%u)\n",
            what, emu->config->file, emu->config->line, at.block.x, at.block.y, at.block.z,
            at.grid_dim.x, at.grid_dim.y, at.grid_dim.z, at.thread.x, at.thread.y, at.thread.z,
            at.block_dim.x, at.block_dim.y, at.block_dim.z);
    fflush(stderr);
    _exit(1);
}

void on_fault(int signal, siginfo_t *info, void *) {
    char what[128];
    snprintf(what, sizeof what, "invalid memory access at %p (%s)", info->si_addr,
             signal == SIGSEGV ? "SIGSEGV" : "SIGBUS");
    kernel_fail(what);
}

void emulator_start() {
    if (emu) return;
    emu = new Emulator();
    stack_t alternate = {};
    alternate.ss_sp = emu->signal_stack;
    alternate.ss_size = sizeof emu->signal_stack;
    sigaltstack(&alternate, NULL);
}

// While a grid runs, a fault is ours to report (the test framework's own
// handler, cmocka's, would jump out of the fiber); before and after, the
// handlers the process had.
struct FaultHandlers {
    struct sigaction segv, bus;
    FaultHandlers() {
        struct sigaction action = {};
        action.sa_sigaction = on_fault;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &action, &segv);
        sigaction(SIGBUS, &action, &bus);
    }
    ~FaultHandlers() {
        sigaction(SIGSEGV, &segv, NULL);
        sigaction(SIGBUS, &bus, NULL);
    }
};

char *stack_of(Fiber &fiber) {
    if (!fiber.stack) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *base = mmap(NULL, kStackBytes + page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED) {
            fprintf(stderr, "cuda emulation: out of memory for fiber stacks\n");
            _exit(1);
        }
        mprotect(base, page, PROT_NONE);  // a stack overflow faults
        fiber.stack = (char *)base + page;
    }
    return fiber.stack;
}

void fiber_main() {
    emu->run(emu->call);
    emu->fibers[emu->current].state = FiberState::kDone;
    _longjmp(emu->scheduler, 1);
}

// Leaves the running fiber in `state` and goes back to the scheduler.
void wait_as(FiberState state) {
    Fiber &fiber = emu->fibers[emu->current];
    fiber.state = state;
    if (!_setjmp(fiber.resume)) _longjmp(emu->scheduler, 1);
}

// Runs fiber t until it waits or ends.
void resume(int t, int started) {
    emu->current = t;
    if (_setjmp(emu->scheduler)) return;
    Fiber &fiber = emu->fibers[t];
    if (started) _longjmp(fiber.resume, 1);
#if defined(__x86_64__)
    // onto the fiber's stack (16-byte aligned at the call), never back
    asm volatile("mov %0, %%rsp\n\tcall *%1\n\tud2"
                 :
                 : "r"(fiber.stack + kStackBytes), "r"(&fiber_main)
                 : "memory");
#else
    swapcontext(&emu->start, &fiber.context);
#endif
}

// Releases the lanes of warp `warp` waiting at a shuffle once all of its
// lanes are there; 1 when it released them.
int release_shuffle(int warp) {
    const int first = warp * 32;
    const int last = first + 32 < emu->threads ? first + 32 : emu->threads;
    int shuffling = 0, elsewhere = 0;
    for (int t = first; t < last; t++) {
        if (emu->fibers[t].state == FiberState::kAtShuffle) shuffling++;
        else elsewhere++;
    }
    if (shuffling == 0) return 0;
    if (elsewhere) {
        for (int t = first; t < last; t++)
            if (emu->fibers[t].state != FiberState::kAtShuffle) emu->current = t;
        kernel_fail("a warp shuffle with a full mask that not every lane of the warp reaches "
                    "(this thread waits elsewhere or has returned)");
    }
    if (last - first < 32) {
        emu->current = first;
        kernel_fail("a warp shuffle with a full mask in a partial warp (block size not a "
                    "multiple of 32)");
    }
    for (int t = first; t < last; t++) {
        Fiber &fiber = emu->fibers[t];
        const Fiber &source = emu->fibers[first + fiber.source];
        if (source.bytes != fiber.bytes) {
            emu->current = t;
            kernel_fail("lanes of a warp meet at different shuffles");
        }
        memcpy(fiber.result, source.offered, fiber.bytes);
        fiber.state = FiberState::kReady;
    }
    return 1;
}

void run_block(uint3 block) {
    const LaunchConfig &config = *emu->config;
    const int threads = emu->threads;
    for (int t = 0; t < threads; t++) {
        ThreadIndices &at = emu->indices[t];
        at.block = block;
        at.thread = make_uint3(t % config.block.x, t / config.block.x % config.block.y,
                               t / (config.block.x * config.block.y));
        at.block_dim = config.block;
        at.grid_dim = config.grid;
        Fiber &fiber = emu->fibers[t];
#if !defined(__x86_64__)
        if (!fiber.stack) getcontext(&fiber.context);  // once: makecontext reuses it
        fiber.context.uc_stack.ss_sp = stack_of(fiber);
        fiber.context.uc_stack.ss_size = kStackBytes;
        fiber.context.uc_link = NULL;  // fiber_main never returns
        makecontext(&fiber.context, fiber_main, 0);
#else
        stack_of(fiber);
#endif
        fiber.state = FiberState::kReady;
    }
    // Shared memory starts as NaN bytes: a read of what no thread wrote shows.
    if (!emu->shared.empty()) memset(emu->shared.data(), 0xff, emu->shared.size());
    // Odd blocks run their threads last to first: a missing barrier shows
    // whichever thread the stale read falls on (races are otherwise hidden
    // by the fixed order).
    const int backwards = (block.x + block.y + block.z) % 2;
    for (int pass = 0;; pass++) {
        for (int i = 0; i < threads; i++) {
            const int t = backwards ? threads - 1 - i : i;
            if (emu->fibers[t].state == FiberState::kReady) resume(t, pass > 0);
        }
        int released = 0, done = 0, at_barrier = 0;
        for (int warp = 0; warp * 32 < threads; warp++) released |= release_shuffle(warp);
        if (released) continue;
        for (int t = 0; t < threads; t++) {
            if (emu->fibers[t].state == FiberState::kDone) done++;
            if (emu->fibers[t].state == FiberState::kAtBarrier) at_barrier++;
        }
        if (done == threads) return;
        if (done) {
            for (int t = 0; t < threads; t++)
                if (emu->fibers[t].state == FiberState::kAtBarrier) emu->current = t;
            kernel_fail("__syncthreads not reached by every thread of the block (some have "
                        "returned): undefined behaviour on a GPU");
        }
        for (int t = 0; t < threads; t++) emu->fibers[t].state = FiberState::kReady;
    }
}

int valid_configuration(const LaunchConfig &config) {
    const dim3 b = config.block, g = config.grid;
    const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (threads == 0 || threads > kMaxThreads || b.x > 1024 || b.y > 1024 || b.z > 64) return 0;
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        return 0;
    return 1;
}

}  // namespace

const ThreadIndices &indices() {
    if (!emu || !emu->in_kernel) {
        fprintf(stderr, "cuda emulation: a built-in index read outside a kernel\n");
        _exit(1);
    }
    return emu->indices[emu->current];
}

int lane() { return (int)(emu->current % 32); }

void *dynamic_shared() { return emu->shared.empty() ? NULL : emu->shared.data(); }

void check_aligned(const void *pointer, size_t bytes) {
    if ((uintptr_t)pointer % bytes == 0) return;
    char what[128];
    snprintf(what, sizeof what, "misaligned address: a %zu-byte vector access at %p", bytes,
             pointer);
    kernel_fail(what);
}

void sync_threads() { wait_as(FiberState::kAtBarrier); }

void warp_exchange(const void *value, void *result, size_t bytes, int source) {
    Fiber &fiber = emu->fibers[emu->current];
    memcpy(fiber.offered, value, bytes);
    fiber.bytes = bytes;
    fiber.source = source;
    wait_as(FiberState::kAtShuffle);
    memcpy(result, emu->fibers[emu->current].result, bytes);
}

void check_full_mask(unsigned mask) {
    if (mask != 0xffffffffu) kernel_fail("a warp shuffle with a partial mask (not emulated)");
}

int launch_is_valid(const LaunchConfig *config) {
    emulator_start();
    if (emu->in_kernel) {
        fprintf(stderr, "cuda emulation: a kernel launched from a kernel at %s:%d\n", config->file,
                config->line);
        _exit(1);
    }
    if (!valid_configuration(*config)) {
        set_launch_error(cudaErrorInvalidConfiguration, config);
        return 0;
    }
    if (!stream_is_valid(config->stream)) {
        set_launch_error(cudaErrorInvalidResourceHandle, config);
        return 0;
    }
    if (config->shared_bytes > dynamic_shared_allowance(config->kernel)) {
        set_launch_error(cudaErrorInvalidValue, config);
        return 0;
    }
    return 1;
}

void launch_grid(const LaunchConfig *config, void (*run)(void *), void *call) {
    if (!launch_is_valid(config)) return;
    ltc_emu_log("kernel", config->file, config->line);
    emu->config = config;
    emu->run = run;
    emu->call = call;
    emu->threads = (int)(config->block.x * config->block.y * config->block.z);
    emu->shared.assign(config->shared_bytes, 0);
    emu->in_kernel = true;
    const FaultHandlers handlers;
    // LTC_EMU_BLOCK_ORDER=reverse runs the last block first: a kernel whose
    // result depends on the order of its blocks (one block reading what
    // another writes in the same launch; a GPU gives no order) changes.
    const char *order = getenv("LTC_EMU_BLOCK_ORDER");
    const bool reverse = order && strcmp(order, "reverse") == 0;
    const unsigned long long blocks =
        (unsigned long long)config->grid.x * config->grid.y * config->grid.z;
    for (unsigned long long i = 0; i < blocks; i++) {
        const unsigned long long b = reverse ? blocks - 1 - i : i;
        run_block(make_uint3((unsigned)(b % config->grid.x),
                             (unsigned)(b / config->grid.x % config->grid.y),
                             (unsigned)(b / ((unsigned long long)config->grid.x * config->grid.y))));
    }
    emu->in_kernel = false;
}

}  // namespace ltc_emu
