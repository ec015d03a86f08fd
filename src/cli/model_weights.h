// LightlyTrain's arguments that choose initial weights: its model_args,
// taken out of --model-arg into --checkpoint (torchvision's {"weights": ...},
// timm's {"pretrained": True} and {"checkpoint_path": FILE}, the tag of a
// timm model name "timm/resnet50.a1_in1k"), and its distillation method_args
// teacher_weights, into the teacher's --method-arg.
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

// LightlyTrain's method_args teacher_weights=PATH: the teacher built as
// `teacher` (or method's default) names it, its weights then loaded from
// PATH (torch.load into it): here --method-arg teacher=PATH with
// teacher_arch that name's architecture. 0, or -1 with err (no such file,
// a method without a teacher, a teacher that names no architecture).
int method_args_teacher_weights(TrainConfig *config, const char *method, ErrorMessage *err);

#endif
