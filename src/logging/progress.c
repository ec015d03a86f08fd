// Console progress line / plain progress lines (see progress.h).
#include "logging/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "util/cpu.h"

#define PROGRESS_LINE_CAPACITY 512

struct Progress {
    FILE *stream;
    int is_terminal;
    long total_steps;
    long steps_per_epoch;
    double plain_every_seconds;
    // ETA rate and elapsed time are counted from here.
    double origin_time;
    long origin_step;  // -1: take the step before the first update
    int has_drawn;
    double last_draw_time;
    char line[PROGRESS_LINE_CAPACITY];  // the latest state, untruncated
    int has_state;
    int state_pending;  // the latest state has not been shown yet
    int line_visible;   // terminal: a progress line stands on the current row
};

Progress *progress_create(FILE *stream, int is_terminal, long total_steps, long steps_per_epoch,
                          double plain_every_seconds) {
    Progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->stream = stream;
    p->is_terminal = is_terminal;
    p->total_steps = total_steps > 0 ? total_steps : 0;
    p->steps_per_epoch = steps_per_epoch > 0 ? steps_per_epoch : 0;
    p->plain_every_seconds = plain_every_seconds > 0 ? plain_every_seconds : 0;
    p->origin_time = time_now();
    p->origin_step = -1;
    return p;
}

void progress_set_origin(Progress *p, long steps_done, double now) {
    p->origin_step = steps_done;
    p->origin_time = now;
}

void progress_format_duration(double seconds, char *out, size_t size) {
    if (!isfinite(seconds) || seconds < 0 || seconds > 1e9) {
        snprintf(out, size, "?");
        return;
    }
    const long total = (long)(seconds + 0.5);
    const long hours = total / 3600, minutes = total / 60 % 60, secs = total % 60;
    if (hours > 0)
        snprintf(out, size, "%ld:%02ld:%02ld", hours, minutes, secs);
    else
        snprintf(out, size, "%ld:%02ld", minutes, secs);
}

static long effective_total(const Progress *p, int epochs) {
    if (p->total_steps > 0) return p->total_steps;
    if (p->steps_per_epoch > 0 && epochs > 0) return p->steps_per_epoch * epochs;
    return 0;
}

// Writes the state into p->line.
static void render_line(Progress *p, int epoch, int epochs, long step, float loss,
                        double images_per_second, double data_wait, double now) {
    char *out = p->line;
    const size_t size = sizeof p->line;
    size_t used = 0;
#define APPEND(...)                                                                    \
    do {                                                                               \
        if (used < size) {                                                             \
            const int written_ = snprintf(out + used, size - used, __VA_ARGS__);       \
            if (written_ > 0) used += (size_t)written_;                                \
        }                                                                              \
    } while (0)

    if (epochs > 0)
        APPEND("epoch %d/%d", epoch + 1, epochs);
    else
        APPEND("epoch %d", epoch + 1);
    const long total = effective_total(p, epochs);
    if (total > 0) {
        const double percent = 100.0 * (double)step / (double)total;
        APPEND("  step %ld/%ld %3.0f%%", step, total, floor(percent));
    } else {
        APPEND("  step %ld", step);
    }

    char elapsed_text[32];
    const double elapsed = now - p->origin_time;
    progress_format_duration(elapsed, elapsed_text, sizeof elapsed_text);
    APPEND("  elapsed %s", elapsed_text);
    const long steps_here = step - p->origin_step;
    if (total > 0 && steps_here > 0 && elapsed > 0) {
        char eta_text[32];
        const long remaining = total > step ? total - step : 0;
        progress_format_duration((double)remaining * elapsed / (double)steps_here, eta_text,
                                 sizeof eta_text);
        APPEND("  ETA %s", eta_text);
    }

    if (isfinite(loss))
        APPEND("  loss %.4g", (double)loss);
    else
        APPEND("  loss nan");
    if (isfinite(images_per_second) && images_per_second >= 0)
        APPEND("  %.1f img/s", images_per_second);
    if (isfinite(data_wait)) {
        const double clamped = data_wait < 0 ? 0 : data_wait > 1 ? 1 : data_wait;
        APPEND("  data_wait %.0f%%", 100.0 * clamped);
    }
#undef APPEND
}

static int terminal_width(const Progress *p) {
    struct winsize size;
    const int fd = fileno(p->stream);
    if (fd >= 0 && ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
    return PROGRESS_DEFAULT_WIDTH;
}

// Shows p->line: overwriting the terminal row, or as a plain line.
static void draw(Progress *p, double now) {
    if (p->is_terminal) {
        // One column short of the width: writing the last column makes some
        // terminals wrap, and the next \r would then redraw one row too low.
        int width = terminal_width(p) - 1;
        if (width < 1) width = 1;
        fprintf(p->stream, "\r%.*s\033[K", width, p->line);
        p->line_visible = 1;
    } else {
        fprintf(p->stream, "%s\n", p->line);
    }
    fflush(p->stream);
    p->has_drawn = 1;
    p->last_draw_time = now;
    p->state_pending = 0;
}

void progress_update(Progress *p, int epoch, int epochs, long step, float loss,
                     double images_per_second, double data_wait, double now) {
    if (p->origin_step < 0) p->origin_step = step > 0 ? step - 1 : 0;
    render_line(p, epoch, epochs, step, loss, images_per_second, data_wait, now);
    p->has_state = 1;
    p->state_pending = 1;
    const long total = effective_total(p, epochs);
    const int last_step = total > 0 && step >= total;
    const double interval = p->is_terminal ? PROGRESS_REDRAW_SECONDS : p->plain_every_seconds;
    if (!p->has_drawn || last_step || now - p->last_draw_time >= interval) draw(p, now);
}

void progress_message(Progress *p, const char *text) {
    if (p->is_terminal && p->line_visible) {
        fprintf(p->stream, "\r\033[K%s\n", text);
        p->line_visible = 0;
        if (p->has_state) draw(p, p->last_draw_time);  // keeps the throttle's clock
    } else {
        fprintf(p->stream, "%s\n", text);
        fflush(p->stream);
    }
}

void progress_finish(Progress *p) {
    if (p->has_state && p->state_pending) draw(p, p->last_draw_time);
    if (p->is_terminal && p->line_visible) {
        fputc('\n', p->stream);
        fflush(p->stream);
        p->line_visible = 0;
    }
}

void progress_free(Progress *p) { free(p); }
