// train.log writer and the system information it records (see run_log.h).
#include "logging/run_log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/utsname.h>

// jpeglib.h needs stdio.h (for FILE) included before it.
#include <jpeglib.h>
#include <oneapi/dnnl/dnnl.h>
#include <png.h>
#include <protobuf-c/protobuf-c.h>
#include <webp/decode.h>
#ifdef LTC_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "backend/backend.h"
#include "dist/comm_nccl.h"
#include "util/cpu.h"

#ifndef LTC_VERSION
#define LTC_VERSION "unknown"
#endif

#define RUN_LOG_STRINGIFY_(x) #x
#define RUN_LOG_STRINGIFY(x) RUN_LOG_STRINGIFY_(x)

struct RunLog {
    FILE *file;
};

int run_log_open(RunLog **log, const char *path, ErrorMessage *err) {
    *log = NULL;
    RunLog *created = calloc(1, sizeof *created);
    if (!created) return error_set(err, "%s: out of memory", path);
    created->file = fopen(path, "a");
    if (!created->file) {
        const int saved = errno;
        free(created);
        return error_set(err, "%s: cannot open the run log for appending: %s", path,
                         strerror(saved));
    }
    *log = created;
    return 0;
}

static void write_timestamp(FILE *file) {
    const time_t now = time(NULL);
    struct tm local;
    char text[32];
    if (localtime_r(&now, &local) && strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local) > 0)
        fprintf(file, "%s ", text);
    else
        fputs("(no local time) ", file);
}

void run_log_line(RunLog *log, const char *format, ...) {
    if (!log) return;
    write_timestamp(log->file);
    va_list args;
    va_start(args, format);
    vfprintf(log->file, format, args);
    va_end(args);
    fputc('\n', log->file);
    fflush(log->file);
}

// Characters that never need quoting in a POSIX shell word.
static int shell_safe_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_-./:=,+@%", c) != NULL;
}

void shell_quote_args(FILE *out, int argc, char *const *argv) {
    for (int i = 0; i < argc; i++) {
        if (i > 0) fputc(' ', out);
        const char *arg = argv[i];
        int safe = arg[0] != '\0';
        for (const char *c = arg; *c && safe; c++) safe = shell_safe_char((unsigned char)*c);
        if (safe) {
            fputs(arg, out);
            continue;
        }
        fputc('\'', out);
        for (const char *c = arg; *c; c++) {
            if (*c == '\'')
                fputs("'\\''", out);  // close the quote, an escaped ', reopen
            else
                fputc(*c, out);
        }
        fputc('\'', out);
    }
}

void run_log_command_line(RunLog *log, int argc, char **argv) {
    if (!log) return;
    char *text = NULL;
    size_t length = 0;
    FILE *memory = open_memstream(&text, &length);
    if (!memory) {
        run_log_line(log, "command: (out of memory)");
        return;
    }
    shell_quote_args(memory, argc, argv);
    if (fclose(memory) == 0 && text)
        run_log_line(log, "command: %s", text);
    else
        run_log_line(log, "command: (out of memory)");
    free(text);
}

void system_info_cpu_model(char *out, size_t size) {
    snprintf(out, size, "unknown CPU");
    FILE *file = fopen("/proc/cpuinfo", "r");
    if (!file) return;
    char line[512];
    while (fgets(line, sizeof line, file)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *value = strchr(line, ':');
        if (!value) continue;
        value++;
        while (*value == ' ' || *value == '\t') value++;
        size_t length = strcspn(value, "\r\n");
        if (length == 0) continue;
        snprintf(out, size, "%.*s", (int)length, value);
        break;
    }
    fclose(file);
}

unsigned long long system_info_total_memory(void) {
    FILE *file = fopen("/proc/meminfo", "r");
    if (!file) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, file))
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1) break;
    fclose(file);
    return kib * 1024ull;
}

#ifdef LTC_WITH_CUDA
// The versions and files of the GPU libraries loaded (the pip packages of a
// node's PyTorch are often not the ones built with), and why they cannot be
// used where they cannot.
static void log_gpu_libraries(RunLog *log) {
    char text[1024];
    ErrorMessage err = {{0}};
    if (backend_gpu_libraries(text, sizeof text, &err))
        run_log_line(log, "GPU libraries: %s (unusable: %s)", text, err.text);
    else
        run_log_line(log, "GPU libraries: %s", text);
    if (comm_nccl_version(text, sizeof text, &err))
        run_log_line(log, "NCCL: %s", err.text);
    else
        run_log_line(log, "NCCL: %s", text);
}
#endif

static void log_gpus(RunLog *log) {
#ifdef LTC_WITH_CUDA
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        run_log_line(log, "GPUs: none available (%s)", cudaGetErrorString(status));
        (void)cudaGetLastError();  // clear it so later CUDA calls start clean
        return;
    }
    if (count == 0) {
        run_log_line(log, "GPUs: none available (no CUDA device)");
        return;
    }
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    run_log_line(log, "GPUs: %d (CUDA runtime %d.%d, driver %d.%d)", count, runtime / 1000,
                 runtime % 1000 / 10, driver / 1000, driver % 1000 / 10);
    for (int device = 0; device < count; device++) {
        struct cudaDeviceProp properties;
        status = cudaGetDeviceProperties(&properties, device);
        if (status != cudaSuccess) {
            run_log_line(log, "GPU %d: properties unavailable (%s)", device,
                         cudaGetErrorString(status));
            continue;
        }
        run_log_line(log, "GPU %d: %s, %.1f GiB, compute capability %d.%d", device,
                     properties.name, (double)properties.totalGlobalMem / (1024.0 * 1024 * 1024),
                     properties.major, properties.minor);
    }
    log_gpu_libraries(log);
#else
    run_log_line(log, "GPUs: none (CPU build)");
#endif
}

static const char *compiler_name(void) {
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return __VERSION__;
#endif
}

void run_log_system_info(RunLog *log) {
    if (!log) return;
    char host[256] = "unknown";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    run_log_line(log, "host: %s", host);
    struct utsname os;
    if (uname(&os) == 0)
        run_log_line(log, "OS: %s %s %s (%s)", os.sysname, os.release, os.machine, os.version);
    char model[256];
    system_info_cpu_model(model, sizeof model);
    run_log_line(log, "CPU: %s", model);
    const long logical = sysconf(_SC_NPROCESSORS_ONLN);
    run_log_line(log, "CPU cores: %ld logical, %d usable by this process", logical,
                 cpu_usable_cores());
    const char *simd_override = getenv("LTC_SIMD");
    if (simd_override)  // the override can turn AVX2 off on a CPU that has it
        run_log_line(log, "AVX2: %s (LTC_SIMD=%s)", cpu_has_avx2() ? "yes" : "off or absent",
                     simd_override);
    else
        run_log_line(log, "AVX2: %s", cpu_has_avx2() ? "yes" : "no");
    const unsigned long long memory = system_info_total_memory();
    if (memory > 0)
        run_log_line(log, "memory: %.1f GiB", (double)memory / (1024.0 * 1024 * 1024));
    else
        run_log_line(log, "memory: unknown");
    run_log_line(log, "compiler: %s", compiler_name());
    run_log_line(log, "lightly-train-c version: %s", LTC_VERSION);

    char jpeg_version[32];
#ifdef LIBJPEG_TURBO_VERSION
    snprintf(jpeg_version, sizeof jpeg_version, "libjpeg-turbo %s",
             RUN_LOG_STRINGIFY(LIBJPEG_TURBO_VERSION));
#else
    snprintf(jpeg_version, sizeof jpeg_version, "libjpeg %d", JPEG_LIB_VERSION);
#endif
    const int webp = WebPGetDecoderVersion();
    const dnnl_version_t *dnnl = dnnl_version();
    run_log_line(log, "libraries: %s, libpng %s, libwebp %d.%d.%d, oneDNN %d.%d.%d, protobuf-c %s",
                 jpeg_version, png_get_libpng_ver(NULL), (webp >> 16) & 0xff, (webp >> 8) & 0xff,
                 webp & 0xff, dnnl->major, dnnl->minor, dnnl->patch, protobuf_c_version());
    log_gpus(log);
}

void run_log_close(RunLog *log) {
    if (!log) return;
    fclose(log->file);
    free(log);
}
