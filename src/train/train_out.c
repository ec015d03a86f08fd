// The output folder of a `train` run (--out): its layout checked before
// anything runs, its lock, the folders made once every check passed, and
// what a killed run left there tidied up (see train_run.h).
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logging/log_truncate.h"
#include "train/train_run.h"
#include "util/file.h"
#include "util/output_path.h"

int train_path_join(char *out, size_t size, const char *dir, const char *name) {
    return snprintf(out, size, "%s/%s", dir, name) >= (int)size ? -1 : 0;
}

// 1 when dir exists and holds anything, 0 when absent or empty.
static int folder_used(const char *dir) {
    DIR *handle = opendir(dir);
    if (!handle) return 0;
    int used = 0;
    struct dirent *entry;
    while (!used && (entry = readdir(handle)))
        used = strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
    closedir(handle);
    return used;
}

// Removes old event files so that a run started with --overwrite does not
// show the previous curves in TensorBoard.
static void remove_old_events(const char *dir) {
    DIR *handle = opendir(dir);
    if (!handle) return;
    struct dirent *entry;
    char path[PATH_MAX];
    while ((entry = readdir(handle)))
        if (strncmp(entry->d_name, "events.out.tfevents.", 20) == 0 &&
            train_path_join(path, sizeof path, dir, entry->d_name) == 0)
            unlink(path);
    closedir(handle);
}

// 1 when name is an epoch copy of the checkpoint, "epoch=E-step=S.ckpt".
static int is_epoch_checkpoint(const char *name) {
    int epoch, consumed = 0;
    long step;
    return sscanf(name, "epoch=%d-step=%ld.ckpt%n", &epoch, &step, &consumed) == 2 &&
           consumed > 0 && name[consumed] == '\0';
}

// Removes the epoch copies in dir (the checkpoints folder) but keep (a
// name, or NULL): a run's older ones, or those of the run --overwrite replaces.
static void remove_epoch_checkpoints(const char *dir, const char *keep) {
    DIR *handle = opendir(dir);
    if (!handle) return;
    struct dirent *entry;
    char path[PATH_MAX];
    while ((entry = readdir(handle)))
        if (is_epoch_checkpoint(entry->d_name) && (!keep || strcmp(entry->d_name, keep) != 0) &&
            train_path_join(path, sizeof path, dir, entry->d_name) == 0)
            unlink(path);
    closedir(handle);
}

// The name of the epoch file of `steps` completed steps.
static void epoch_file_name(const TrainRun *run, long steps, char *name, size_t size) {
    snprintf(name, size, "epoch=%ld-step=%ld.ckpt", (steps - 1) / run->steps_per_epoch, steps);
}

// Removes the epoch file of `steps` from dir (the checkpoints folder).
static void remove_epoch_file(const TrainRun *run, const char *dir, long steps) {
    char name[64], path[PATH_MAX];
    epoch_file_name(run, steps, name, sizeof name);
    if (train_path_join(path, sizeof path, dir, name) == 0) unlink(path);
}

// Removes kept file i from the disk and the list.
static void drop_kept(TrainRun *run, const char *dir, int i) {
    remove_epoch_file(run, dir, run->callback_state.kept.steps[i]);
    kept_epochs_remove(&run->callback_state.kept, i);
}

static int monitored(const TrainRun *run) {
    return run->callbacks.monitor_loss && run->callbacks.keep_epoch_checkpoints > 0;
}

int train_out_choose_epoch(TrainRun *run, long completed_steps, float score) {
    run->callback_state.evicted_step = 0;
    if (!monitored(run)) return 1;
    const CallbackSettings *c = &run->callbacks;
    KeptEpochs *kept = &run->callback_state.kept;
    char dir[PATH_MAX];
    if (train_path_join(dir, sizeof dir, run->config->out, "checkpoints")) return 0;
    const int again = kept_epochs_find(kept, completed_steps);  // a resumed run's same step
    if (again >= 0) kept_epochs_remove(kept, again);
    // a resumed run with a smaller K: the worst go first
    while (kept->count > c->keep_epoch_checkpoints)
        drop_kept(run, dir, kept_epochs_worst(kept, c->monitor_max));
    const char *order = c->monitor_max ? "highest" : "lowest";
    int evict = -1;
    if (!kept_epochs_admit(kept, c->keep_epoch_checkpoints, c->monitor_max, score, &evict)) {
        run_log_line(run->log, "step %ld: train_loss %.6g is not among the %d %s kept: no epoch "
                               "file", completed_steps, (double)score, c->keep_epoch_checkpoints,
                     order);
        return 0;
    }
    char replaced[64] = "";
    if (evict >= 0) {
        run->callback_state.evicted_step = kept->steps[evict];
        epoch_file_name(run, kept->steps[evict], replaced, sizeof replaced);
        kept_epochs_remove(kept, evict);
    }
    kept_epochs_append(kept, completed_steps, score);
    run_log_line(run->log, "step %ld: train_loss %.6g is among the %d %s: epoch file kept%s%s",
                 completed_steps, (double)score, c->keep_epoch_checkpoints, order,
                 replaced[0] ? " in place of " : "", replaced);
    return 1;
}

int train_out_keep_epoch(TrainRun *run, long completed_steps, ErrorMessage *err) {
    char dir[PATH_MAX], name[64], path[PATH_MAX];
    if (train_path_join(dir, sizeof dir, run->config->out, "checkpoints"))
        return error_set(err, "%s/checkpoints: path too long", run->config->out);
    epoch_file_name(run, completed_steps, name, sizeof name);
    if (train_path_join(path, sizeof path, dir, name))
        return error_set(err, "%s/%s: path too long", dir, name);
    unlink(path);  // the same epoch again (a resumed run): the new state
    if (link(run->checkpoint_path, path) != 0)
        return error_set(err, "could not keep %s (a hard link to last.ckpt): %s", path,
                         strerror(errno));
    if (run->callback_state.evicted_step > 0)
        remove_epoch_file(run, dir, run->callback_state.evicted_step);
    // save_top_k -1 keeps every epoch file (a resumed run's of the same
    // steps replaced above), 1 without a monitor the latest
    if (!run->callbacks.monitor_loss && run->callbacks.keep_epoch_checkpoints == 1)
        remove_epoch_checkpoints(dir, name);
    return 0;
}

// A resumed monitored run killed between its checkpoint and its epoch
// file's link: the file that one replaces (its step in the checkpoint) is
// removed and the new one, the checkpoint's own step, linked from
// last.ckpt. Other epoch files stay as they are.
static void reconcile_kept(TrainRun *run) {
    const CallbackState *state = &run->callback_state;
    char dir[PATH_MAX], name[64], path[PATH_MAX];
    if (train_path_join(dir, sizeof dir, run->config->out, "checkpoints")) return;
    if (state->evicted_step > 0 && kept_epochs_find(&state->kept, state->evicted_step) < 0)
        remove_epoch_file(run, dir, state->evicted_step);
    epoch_file_name(run, run->start_step, name, sizeof name);
    if (kept_epochs_find(&state->kept, run->start_step) >= 0 &&
        train_path_join(path, sizeof path, dir, name) == 0 && access(path, F_OK) != 0 &&
        link(run->checkpoint_path, path) != 0)
        train_message(run, "warning: could not keep %s (a hard link to last.ckpt): %s", path,
                      strerror(errno));
}

// The folders and files of the output layout: every one must be writable
// before anything runs, so a run never fails at its first checkpoint.
static const char *const out_folders[] = {"checkpoints", "exported_models"};
static const char *const out_files[] = {"checkpoints/last.ckpt",
                                        "exported_models/exported_last.safetensors",
                                        "train.log", "metrics.jsonl"};

static int check_out_layout(const char *out, ErrorMessage *err) {
    char path[PATH_MAX];
    if (output_folder_check(out, err)) return error_prefix(err, "--out");
    for (size_t i = 0; i < sizeof out_folders / sizeof out_folders[0]; i++)
        if (train_path_join(path, sizeof path, out, out_folders[i]) ||
            output_folder_check(path, err))
            return error_prefix(err, "--out %s", out);
    for (size_t i = 0; i < sizeof out_files / sizeof out_files[0]; i++)
        if (train_path_join(path, sizeof path, out, out_files[i]) || output_entry_check(path, err))
            return error_prefix(err, "--out %s", out);
    return 0;
}

int train_out_check(const TrainConfig *config, int rank, ErrorMessage *err) {
    char checkpoint[PATH_MAX];
    if (train_path_join(checkpoint, sizeof checkpoint, config->out, "checkpoints/last.ckpt"))
        return error_set(err, "--out %s: path too long", config->out);
    // Only rank 0 writes there; the others need just the checkpoint to resume.
    if (rank == 0 && check_out_layout(config->out, err)) return -1;
    const int has_checkpoint = access(checkpoint, F_OK) == 0;
    if (config->resume) {
        if (!has_checkpoint)
            return error_set(err, "--resume: no checkpoint to resume from (%s: %s); pass "
                                  "--overwrite instead to start over",
                             checkpoint, strerror(errno));
    } else if (rank == 0 && folder_used(config->out) && !config->overwrite) {
        if (has_checkpoint)
            return error_set(err, "--out %s is not empty: pass --overwrite to replace its run "
                                  "or --resume to continue it", config->out);
        return error_set(err, "--out %s is not empty and holds no checkpoint to resume from "
                              "(a run stopped before its first checkpoint, or other files): "
                              "pass --overwrite to start over there", config->out);
    }
    return 0;
}

int train_export_pt_path(char *out, size_t size, const char *export_path) {
    static const char suffix[] = ".safetensors";
    const size_t length = strlen(export_path), suffix_length = sizeof suffix - 1;
    if (length < suffix_length || strcmp(export_path + length - suffix_length, suffix) != 0)
        return -1;
    const int written = snprintf(out, size, "%.*s.pt", (int)(length - suffix_length), export_path);
    return written < 0 || (size_t)written >= size ? -1 : 0;
}

int train_out_prepare(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    if (train_path_join(run->checkpoint_path, sizeof run->checkpoint_path, config->out,
                  "checkpoints/last.ckpt") ||
        train_path_join(run->export_path, sizeof run->export_path, config->out,
                  "exported_models/exported_last.safetensors") ||
        train_export_pt_path(run->export_pt_path, sizeof run->export_pt_path, run->export_path))
        return error_set(err, "--out %s: path too long", config->out);
    return train_out_check(config, run->rank, err);
}

// Rank 0 holds --out's lock from its checks to the end (util/output_path.h):
// a second run into the same folder, with --resume or --overwrite or started
// at the same instant, is refused before it writes or removes anything.
// Nothing to lock while the folder does not exist yet (train_out_create locks it).
int train_out_lock(TrainRun *run, ErrorMessage *err) {
    struct stat info;
    if (run->rank != 0 || run->out_lock_held || stat(run->config->out, &info) != 0 ||
        !S_ISDIR(info.st_mode))
        return 0;
    if (output_folder_lock(run->config->out, &run->out_lock_fd, err))
        return error_prefix(err, "--out");
    run->out_lock_held = 1;
    return 0;
}

// The event files' folder: --out, or under it the folders of --loggers
// tensorboard.name / version / sub_dir, as Lightning's TensorBoardLogger
// with save_dir --out places them.
static int resolve_events_dir(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    const LoggerSettings *loggers = config->loggers;
    const char *parts[] = {loggers ? loggers->tensorboard_name : NULL,
                           loggers ? loggers->tensorboard_version : NULL,
                           loggers ? loggers->tensorboard_sub_dir : NULL};
    snprintf(run->events_dir, sizeof run->events_dir, "%s", config->out);
    for (int i = 0; i < 3; i++) {
        char joined[PATH_MAX];
        if (!parts[i]) continue;
        if (train_path_join(joined, sizeof joined, run->events_dir, parts[i]))
            return error_set(err, "%s/%s: path too long", run->events_dir, parts[i]);
        memcpy(run->events_dir, joined, sizeof joined);
    }
    return 0;
}

void train_out_discard_events(TrainRun *run) {
    static const char *const events[] = {"events.out.tfevents.*"};
    if (!run->events_dir[0]) return;  // stopped before train_out_create
    output_folder_remove_entries(run->events_dir, events, 1, 0);
    // The folders under --out it made, from the deepest (rmdir keeps a filled one).
    char folder[PATH_MAX];
    snprintf(folder, sizeof folder, "%s", run->events_dir);
    const size_t out_length = strlen(run->config->out);
    while (strlen(folder) > out_length && rmdir(folder) == 0) {
        char *slash = strrchr(folder, '/');
        if (!slash) break;
        *slash = '\0';
    }
}

// After every check passed: the folders of the output layout. Returns the
// exit status: 2 when another run took the new folder's lock first.
int train_out_create(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    char path[PATH_MAX];
    struct stat info;
    if (resolve_events_dir(run, err)) return 1;
    run->out_made = stat(config->out, &info) != 0;
    run->out_fresh = !config->resume && (run->out_made || !folder_used(config->out));
    if (output_folder_create(config->out, err)) return 1;
    const int locked_at_checks = run->out_lock_held;
    if (train_out_lock(run, err)) return 2;
    // A folder made since the checks: another run may have made, filled
    // and left it meanwhile (the setup between them takes seconds), so the
    // checks run again under the lock.
    if (!locked_at_checks && train_out_check(config, run->rank, err)) return 2;
    if (config->overwrite && !config->resume) {
        remove_old_events(run->events_dir);
        if (train_path_join(path, sizeof path, config->out, "checkpoints") == 0)
            remove_epoch_checkpoints(path, NULL);
    }
    for (size_t i = 0; i < sizeof out_folders / sizeof out_folders[0]; i++) {
        train_path_join(path, sizeof path, config->out, out_folders[i]);
        if (output_folder_create(path, err)) return 1;
    }
    const int tensorboard = !config->loggers || config->loggers->tensorboard;
    return tensorboard && output_folder_create(run->events_dir, err) ? 1 : 0;
}

// What a killed run may have left in --out: temporary files of interrupted
// atomic writes (removed when their process is gone) and, on --resume, log
// records of the steps after the checkpoint (dropped: they are run again).
int train_out_tidy(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    // The names train writes atomically in each folder: only their
    // temporaries are removed (a user's "notes.tmp.123" is not ours).
    static const char *const written[][4] = {{"metrics.jsonl", "events.out.tfevents.*",
                                              "mlflow_run.txt", NULL},
                                             {"last.ckpt", NULL},
                                             {"exported_last.safetensors",
                                              "exported_last.pt", NULL}};
    char names[1024] = "", path[PATH_MAX];
    int removed = file_remove_stale_temporaries(config->out, written[0], names, sizeof names);
    for (size_t i = 0; i < sizeof out_folders / sizeof out_folders[0]; i++) {
        train_path_join(path, sizeof path, config->out, out_folders[i]);
        removed += file_remove_stale_temporaries(path, written[i + 1], names, sizeof names);
    }
    static const char *const events[] = {"events.out.tfevents.*", NULL};
    if (strcmp(run->events_dir, config->out) != 0)  // --loggers tensorboard.name=...
        removed += file_remove_stale_temporaries(run->events_dir, events, names, sizeof names);
    if (removed)
        train_message(run, "removed %d temporary file(s) left by a run killed while writing: %s",
                      removed, names);
    if (!config->resume) return 0;
    if (monitored(run)) reconcile_kept(run);
    LogTruncation cut = {0};
    train_path_join(path, sizeof path, config->out, "metrics.jsonl");
    if (metrics_jsonl_truncate(path, run->start_step, &cut, err) ||
        tb_events_truncate(run->events_dir, run->start_step, &cut, err))
        return -1;
    if (cut.dropped)
        run_log_line(run->log, "dropped %ld log record(s) of the steps after the checkpoint "
                               "(step %ld): they are logged again as they run", cut.dropped,
                     run->start_step);
    run->knn_logged_at_start = cut.knn_at_step;
    return 0;
}
