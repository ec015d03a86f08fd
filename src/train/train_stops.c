// When a run ends before its last step, and why: Lightning's Timer
// (--max-time), EarlyStopping (--callbacks early_stopping.patience) and the
// minimums both wait for (--min-epochs, --min-steps), as LightlyTrain's
// Trainer applies them. Signals are the loop's own (trainer.c): they ask
// for a stop to resume from and wait for nothing.
#include <stdio.h>

#include "cli/run_limits.h"
#include "train/train_run.h"
#include "util/cpu.h"

double train_time_elapsed(const TrainRun *run) {
    return run->timer_offset + (time_now() - run->timer_start);
}

int train_time_is_up(const TrainRun *run) {
    return run->config->max_time_seconds >= 0 &&
           train_time_elapsed(run) >= run->config->max_time_seconds;
}

int train_minimums_met(const TrainRun *run, long completed) {
    return run_minimums_met(run->config->min_epochs, run->config->min_steps, completed,
                            run->steps_per_epoch);
}

// early_stopping checks at every epoch end before the last.
static int patience_due(const TrainRun *run, long completed) {
    return run->callbacks.early_stopping_patience && completed % run->steps_per_epoch == 0 &&
           completed != run->total_steps;
}

// At a patience_due step: `loss` (the epoch's last step's: the train_loss a
// Lightning callback sees then) lower than the best so far resets the
// count, else adds one; 1 when the count reaches the patience. The loss is
// the ranks' mean, so they decide alike; the decision is agreed all the
// same, as a rank that stopped alone would leave the others waiting.
static int patience_ran_out(TrainRun *run, double loss) {
    CallbackState *state = &run->callback_state;
    int out = 0;
    if (!state->has_best || loss < state->best) {
        state->has_best = 1;
        state->best = (float)loss;
        state->wait = 0;
    } else {
        out = ++state->wait >= run->callbacks.early_stopping_patience;
    }
    return train_agree(run, out, NULL);
}

// The time limit as this rank knows it: one process reads its own clock,
// ranks rank 0's decision from the step records.
static int time_up(const TrainRun *run) {
    return run->time_up_seen || (run->world_size == 1 && train_time_is_up(run));
}

// Once per run, when a stop was asked for before the minimums: Lightning's
// "Training will continue..." line.
static void say_deferred(TrainRun *run, const char *what, long completed) {
    if (run->stop_deferred_said) return;
    run->stop_deferred_said = 1;
    train_message(run, "%s at step %ld, but --min-epochs %d / --min-steps %d are not reached: "
                       "training on until they are", what, completed, run->config->min_epochs,
                  run->config->min_steps);
}

int train_early_stop_pending(const TrainRun *run, long completed) {
    return completed < run->total_steps && (time_up(run) || run->patience_out) &&
           train_minimums_met(run, completed);
}

int train_early_stop(TrainRun *run, long completed, double loss) {
    if (patience_due(run, completed) && patience_ran_out(run, loss))
        run->patience_out = 1;  // kept, as Lightning's should_stop is
    if (completed >= run->total_steps) return 0;
    const int asked = time_up(run) ? EARLY_STOP_TIME : run->patience_out ? EARLY_STOP_PATIENCE : 0;
    if (!asked || train_minimums_met(run, completed)) return asked;
    say_deferred(run, asked == EARLY_STOP_TIME ? "--max-time reached" : "early stopping asked",
                 completed);
    return 0;
}

int train_early_stop_saves(const TrainRun *run, long completed) {
    const CallbackSettings *c = &run->callbacks;
    const long epoch = (completed + run->steps_per_epoch - 1) / run->steps_per_epoch;
    const int epoch_file = c->keep_epoch_checkpoints && !c->checkpoint_every_steps &&
                           epoch % c->checkpoint_every_epochs == 0;
    return epoch_file ? SAVE_EPOCH_FILE : 0;
}

int train_early_stop_message(TrainRun *run, int reason, long completed) {
    if (reason == EARLY_STOP_TIME) {
        char limit[32], took[32];
        max_time_format(run->config->max_time_seconds, limit, sizeof limit);
        max_time_format(train_time_elapsed(run), took, sizeof took);
        return train_stop(run, 0, "--max-time %s reached after step %ld of %ld (training time "
                                  "%s): checkpoint and export written; --resume with a longer "
                                  "--max-time trains on", limit, completed, run->total_steps,
                          took);
    }
    return train_stop(run, 0, "early stopping after epoch %ld (step %ld of %ld): train_loss has "
                              "not gone below its best, %.6g, for %ld epoch end(s) (--callbacks "
                              "early_stopping.patience); checkpoint and export written",
                      (completed + run->steps_per_epoch - 1) / run->steps_per_epoch, completed,
                      run->total_steps, (double)run->callback_state.best,
                      run->callback_state.wait);
}

int train_out_of_time(TrainRun *run) {
    const long at = run->start_step;
    if (run->config->max_time_seconds < 0 || run->timer_offset < run->config->max_time_seconds)
        return -1;
    if (!train_minimums_met(run, at)) {
        say_deferred(run, "--max-time spent", at);
        return -1;
    }
    if (train_save_agreed(run, at, at == 0 ? SAVE_CHECKPOINT | SAVE_EXPORT : SAVE_EXPORT))
        return 1;
    char limit[32], took[32];
    max_time_format(run->config->max_time_seconds, limit, sizeof limit);
    max_time_format(run->timer_offset, took, sizeof took);
    train_message(run, "--max-time %s: the training time (%s) is spent before step %ld; "
                       "nothing trained, %s written", limit, took, at + 1,
                  at == 0 ? "the initial model's checkpoint and export" : "the export");
    return 0;
}
