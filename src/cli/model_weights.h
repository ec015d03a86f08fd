// LightlyTrain's model_args that choose a model's initial weights, taken out
// of --model-arg into --checkpoint: torchvision's {"weights": ...} for its
// ResNets, timm's {"pretrained": True} and {"checkpoint_path": FILE}, and the
// tag of a timm model name ("timm/resnet50.a1_in1k").
#ifndef LTC_CLI_MODEL_WEIGHTS_H
#define LTC_CLI_MODEL_WEIGHTS_H

#include "train/trainer.h"
#include "util/error.h"

// model: the --model choice ("timm/resnet50"); model_given: as typed
// ("timm/resnet50.a1_in1k"), or NULL. Sets config->checkpoint (not when
// --resume continues a run), removes the entries it takes from
// config->model_args and prints a note on stderr where timm would warn.
// Returns 0, or -1 with err for a value the model does not have or for
// weights given twice.
int model_args_weights(TrainConfig *config, const char *model, const char *model_given,
                       ErrorMessage *err);

#endif
