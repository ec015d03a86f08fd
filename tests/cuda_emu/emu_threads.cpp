// The CUDA emulation's thread model: a launch runs its grid block after
// block on the calling thread; the threads of a block are fibers (a small
// stack each from its start to its end, with a guard page below it, which
// the next thread takes when one ends without waiting; on x86-64 switched by
// switch_stacks below, which saves the six callee-saved registers and the
// stack pointer, nothing else: a launch of millions of threads stays quick;
// elsewhere started with makecontext / swapcontext and switched with
// _setjmp / _longjmp, which save no signal mask) that run in thread order
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
#if defined(__x86_64__)
    void *saved;  // its stack pointer while it waits (switch_stacks)
#else
    ucontext_t context;  // for its start
    jmp_buf resume;      // where it waits
#endif
    char *stack;  // while it runs or waits: kStackBytes usable, a guard page below
    int source;  // shuffle: the lane read
    size_t bytes;
    unsigned char offered[16], result[16];
};

struct Emulator {
    Fiber fibers[kMaxThreads];
    FiberState states[kMaxThreads];  // apart from the fibers: scanned after every pass
    ThreadIndices indices[kMaxThreads];
    int threads;   // of the running block
    int current;   // the running fiber
    int position;  // where the pass over the block's threads is (thread_at)
    bool backwards;  // the block runs its threads last to first
    bool in_kernel;
#if defined(__x86_64__)
    void *scheduler;  // its stack pointer while a fiber runs
#else
    ucontext_t start;   // the scheduler, while a fiber starts
    jmp_buf scheduler;  // the scheduler, while a fiber runs
#endif
    const LaunchConfig *config;
    void (*run)(void *);
    void *call;
    std::vector<unsigned char> shared;  // dynamic shared memory
    std::vector<char *> free_stacks;    // stacks no fiber holds
    char signal_stack[64 * 1024];
};

Emulator *emu;

#if defined(__x86_64__)
// switch_stacks(save, next): pushes the callee-saved registers, stores the
// stack pointer in *save, then takes `next` (a stack pointer stored so, or
// a new fiber's first frame) and pops its registers. The caller's other
// registers are the compiler's to save, as for any call.
extern "C" void ltc_emu_switch_stacks(void **save, void *next);
asm(R"(
    .text
    .p2align 4
    .type ltc_emu_switch_stacks, @function
ltc_emu_switch_stacks:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size ltc_emu_switch_stacks, .-ltc_emu_switch_stacks
)");
#endif

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

// A stack for a fiber that starts. A fiber that ends without waiting gives
// its stack back and the next one starts on it: in a kernel without
// barriers every thread runs on the same stack, in the caches; one that
// waits keeps its stack until it ends (its frames stay where they are).
char *take_stack() {
    if (!emu->free_stacks.empty()) {
        char *stack = emu->free_stacks.back();
        emu->free_stacks.pop_back();
        return stack;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *base = mmap(NULL, kStackBytes + page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        fprintf(stderr, "cuda emulation: out of memory for fiber stacks\n");
        _exit(1);
    }
    mprotect(base, page, PROT_NONE);  // a stack overflow faults
    return (char *)base + page;
}

// The thread at `position` of a pass over the running block.
int thread_at(int position) { return emu->backwards ? emu->threads - 1 - position : position; }

// Runs the thread it starts with, then, while the next thread of the pass
// has not started, that one on the same stack, without going back to the
// scheduler (in a kernel without barriers a whole block runs so, and no
// thread costs a switch); back to the scheduler when one waits (it keeps
// the stack) or none is left to start.
[[noreturn]] void fiber_main() {
    for (;;) {
        emu->run(emu->call);
        emu->states[emu->current] = FiberState::kDone;
        const int position = emu->position + 1;
        if (position >= emu->threads) break;
        const int next = thread_at(position);
        Fiber &fiber = emu->fibers[next];
        if (fiber.stack || emu->states[next] != FiberState::kReady) break;  // started
        fiber.stack = emu->fibers[emu->current].stack;
        emu->fibers[emu->current].stack = NULL;
        emu->position = position;
        emu->current = next;
        running_indices = &emu->indices[next];
    }
#if defined(__x86_64__)
    void *finished;
    ltc_emu_switch_stacks(&finished, emu->scheduler);
#else
    _longjmp(emu->scheduler, 1);
#endif
    __builtin_unreachable();
}

// Sets fiber t up to start at fiber_main on the stack it took.
void prepare(int t) {
    Fiber &fiber = emu->fibers[t];
#if defined(__x86_64__)
    // Its first frame as switch_stacks leaves one: six registers (zero),
    // then fiber_main as the return address 16 bytes below a 16-byte
    // aligned top, so that fiber_main starts as after a call. The top is
    // (t % 64) cache lines below the stack's end: the stacks of a block
    // whose threads wait lie a multiple of 4 KB apart, and tops at the same
    // offset in their pages would share one set of the CPU's caches.
    char *top = fiber.stack + kStackBytes - (size_t)(t % 64) * 64;
    void **frame = (void **)(top - 16) - 6;
    for (int i = 0; i < 6; i++) frame[i] = NULL;
    frame[6] = (void *)&fiber_main;
    fiber.saved = frame;
#else
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = fiber.stack;
    fiber.context.uc_stack.ss_size = kStackBytes;
    fiber.context.uc_link = NULL;  // fiber_main never returns
    makecontext(&fiber.context, fiber_main, 0);
#endif
}

// Leaves the running fiber in `state` and goes back to the scheduler.
void wait_as(FiberState state) {
    emu->states[emu->current] = state;
    Fiber &fiber = emu->fibers[emu->current];
#if defined(__x86_64__)
    ltc_emu_switch_stacks(&fiber.saved, emu->scheduler);
#else
    if (!_setjmp(fiber.resume)) _longjmp(emu->scheduler, 1);
#endif
}

// Runs fiber t until it waits or ends (and those fiber_main runs after it).
void resume(int t) {
    emu->current = t;
    running_indices = &emu->indices[t];
    Fiber &fiber = emu->fibers[t];
    const bool starting = !fiber.stack;
    if (starting) {
        fiber.stack = take_stack();
        prepare(t);
    }
#if defined(__x86_64__)
    ltc_emu_switch_stacks(&emu->scheduler, fiber.saved);
#else
    if (!_setjmp(emu->scheduler)) {
        if (starting) swapcontext(&emu->start, &fiber.context);  // never returns here
        else _longjmp(fiber.resume, 1);
    }
#endif
    Fiber &last = emu->fibers[emu->current];
    if (emu->states[emu->current] == FiberState::kDone) {
        emu->free_stacks.push_back(last.stack);
        last.stack = NULL;
    }
}

// Releases the lanes of warp `warp` waiting at a shuffle once all of its
// lanes are there; 1 when it released them.
int release_shuffle(int warp) {
    const int first = warp * 32;
    const int last = first + 32 < emu->threads ? first + 32 : emu->threads;
    int shuffling = 0, elsewhere = 0;
    for (int t = first; t < last; t++) {
        if (emu->states[t] == FiberState::kAtShuffle) shuffling++;
        else elsewhere++;
    }
    if (shuffling == 0) return 0;
    if (elsewhere) {
        for (int t = first; t < last; t++)
            if (emu->states[t] != FiberState::kAtShuffle) emu->current = t;
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
        emu->states[t] = FiberState::kReady;
    }
    return 1;
}

// Every thread's indices but its block's (the same in every block).
void set_thread_indices(const LaunchConfig &config) {
    unsigned x = 0, y = 0, z = 0;
    for (int t = 0; t < emu->threads; t++) {
        ThreadIndices &at = emu->indices[t];
        at.thread = make_uint3(x, y, z);
        at.block_dim = config.block;
        at.grid_dim = config.grid;
        if (++x == config.block.x) {
            x = 0;
            if (++y == config.block.y) y = 0, z++;
        }
    }
}

void run_block(uint3 block) {
    const int threads = emu->threads;
    for (int t = 0; t < threads; t++) {
        emu->indices[t].block = block;
        emu->states[t] = FiberState::kReady;
    }
    // Shared memory starts as NaN bytes: a read of what no thread wrote shows.
    if (!emu->shared.empty()) memset(emu->shared.data(), 0xff, emu->shared.size());
    // Odd blocks run their threads last to first: a missing barrier shows
    // whichever thread the stale read falls on (races are otherwise hidden
    // by the fixed order).
    emu->backwards = (block.x + block.y + block.z) % 2;
    for (;;) {
        for (emu->position = 0; emu->position < threads; emu->position++) {
            const int t = thread_at(emu->position);
            if (emu->states[t] == FiberState::kReady) resume(t);
        }
        int done = 0, shuffling = 0;
        for (int t = 0; t < threads; t++) {
            if (emu->states[t] == FiberState::kDone) done++;
            if (emu->states[t] == FiberState::kAtShuffle) shuffling = 1;
        }
        if (done == threads) return;
        int released = 0;
        if (shuffling)
            for (int warp = 0; warp * 32 < threads; warp++) released |= release_shuffle(warp);
        if (released) continue;
        if (done) {
            for (int t = 0; t < threads; t++)
                if (emu->states[t] == FiberState::kAtBarrier) emu->current = t;
            kernel_fail("__syncthreads not reached by every thread of the block (some have "
                        "returned): undefined behaviour on a GPU");
        }
        for (int t = 0; t < threads; t++) emu->states[t] = FiberState::kReady;
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

const ThreadIndices *running_indices;

void index_outside_kernel() {
    fprintf(stderr, "cuda emulation: a built-in index read outside a kernel\n");
    _exit(1);
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
    set_thread_indices(*config);
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
    running_indices = NULL;
}

}  // namespace ltc_emu
