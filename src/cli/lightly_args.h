// LightlyTrain's nested command-line arguments of `lightly-train pretrain`
// that are options of `train` here, as its command line spells them
// (optim_args.lr=0.1, trainer_args.max_epochs=5, ...): rewritten into the
// option before the option table reads the command line, so that a
// LightlyTrain command pastes as it is. The same mapping as the Python
// API's (python/lightly_train_c/_arguments.py):
//   optim_args.lr, optim_args.weight_decay          --lr, --weight-decay
//   trainer_args.max_epochs, .max_steps,            --epochs, --max-steps,
//   .log_every_n_steps, .accumulate_grad_batches    --log-every, --accumulate-grad-batches
//   trainer_args.max_time (.max_time.UNIT=N),       --max-time (UNIT=N), --limit-train-batches,
//   .limit_train_batches, .gradient_clip_val,       --gradient-clip-val, --progress-bar,
//   .enable_progress_bar, .min_epochs, .min_steps,  --min-epochs, --min-steps,
//   .fast_dev_run                                   --fast-dev-run
//                                                   (Lightning's, cli/run_limits.h)
//   trainer_args.precision, .accelerator, .devices, the options of those names (LightlyTrain
//   .num_nodes, .strategy, .sync_batchnorm          sets them itself; trainer_args' win)
//   trainer_args.gradient_clip_algorithm=norm       what the program does: dropped
//   trainer_args.deterministic, .benchmark,         any boolean, dropped (runs are
//   .enable_model_summary                           reproducible, cuDNN's algorithms measured)
//   trainer_args.check_val_every_n_epoch,           any number, dropped: pretraining has
//   .val_check_interval, .num_sanity_val_steps,     no validation loop (nor has
//   .limit_val_batches                              LightlyTrain's)
//   trainer_args.KEY=None, loader_args.KEY=None     dropped: the program's default
//   activation_checkpoint_args.enabled,             --activation-checkpointing,
//   .every_n_blocks                                 --activation-checkpointing-every
//   loader_args.batch_size, .num_workers            ignored, as LightlyTrain ignores them
//   loader_args.shuffle=true, .drop_last=true       what the loader does: dropped
//   loader_args.pin_memory, .persistent_workers     any boolean, dropped (workers persist,
//                                                   GPU batches are pinned)
//   transform_args.PATH=VALUE                      cli/transform_args.h
//   NAME=None (or null) for a parameter whose      dropped: LightlyTrain's spelling of
//   default is None (embed_dim, checkpoint,        its default
//   model_args, method_args, transform_args, loader_args, trainer_args,
//   optim_args, loggers, callbacks)
// Other keys under these names are refused naming what is taken.
#ifndef LTC_CLI_LIGHTLY_ARGS_H
#define LTC_CLI_LIGHTLY_ARGS_H

#include "util/error.h"

typedef struct LightlyArgs {
    int argc, capacity;
    char **argv;   // argv's pointers, the rewritten ones into owned; NULL after the last
    char **owned;  // the rewritten arguments (allocated)
    int owned_count;
} LightlyArgs;

// args gets argv with those arguments rewritten (or dropped); the others
// are argv's own strings. 0, or -1 with err naming the argument.
int lightly_args_translate(int argc, char **argv, LightlyArgs *args, ErrorMessage *err);
void lightly_args_free(LightlyArgs *args);

#endif
