"""LightlyTrain's distillation losses and the pieces around them written
out in PyTorch (torch only, no numpy): the v1 (global), v3 (global + local)
and v2 (dense MSE) losses, the bilinear resize of a channels-last map and
the teacher queue update. tools/make_distillation_fixtures.py checks the
losses against LightlyTrain's own modules and writes the fixtures from
them; tools/compare/pytorch_train_step.py times them (also on a GPU node,
where only torch may be installed).
"""
import torch
import torch.nn.functional as F


def kl_batchmean(student_logits, teacher_logits, temperature):
    """KLDivLoss(batchmean) of log_softmax(student / t) against softmax(teacher / t)."""
    target = F.softmax(teacher_logits / temperature, dim=-1)
    log_student = F.log_softmax(student_logits / temperature, dim=-1)
    pointwise = torch.xlogy(target, target) - target * log_student
    return pointwise.sum() / student_logits.shape[0]


class WrittenV1:
    def __init__(self, temperature):
        self.temperature = temperature

    def __call__(self, teacher_features, student_features, queue):
        return kl_batchmean(student_features @ queue.T, teacher_features @ queue.T,
                            self.temperature)


class WrittenV3:
    def __init__(self, temperature_global, temperature_local):
        self.temperatures = (temperature_global, temperature_local)

    def __call__(self, teacher_features_global, teacher_features_local, student_features_global,
                 student_features_local, queue):
        global_loss = kl_batchmean(student_features_global @ queue.T,
                                   teacher_features_global @ queue.T, self.temperatures[0])
        tokens = teacher_features_local.shape[1]
        teacher = teacher_features_local @ teacher_features_local.transpose(1, 2)
        student = student_features_local @ student_features_local.transpose(1, 2)
        local_loss = kl_batchmean(student.reshape(-1, tokens), teacher.reshape(-1, tokens),
                                  self.temperatures[1])
        return global_loss, local_loss


class WrittenV2:
    def __call__(self, teacher_features, student_features):
        return ((teacher_features - student_features) ** 2).mean()


def resize_map(x, height, width):
    """(B, H, W, C) -> (B, height, width, C) with LightlyTrain's F.interpolate."""
    y = F.interpolate(x.permute(0, 3, 1, 2), size=(height, width), mode="bilinear",
                      align_corners=False)
    return y.permute(0, 2, 3, 1)


def update_queue(queue, teacher):
    """LightlyTrain's _update_queue, as a function of the old queue."""
    batch, size = teacher.shape[0], queue.shape[0]
    if batch >= size:
        return teacher[:size].clone()
    new = queue.clone()
    new[batch:] = queue[:-batch].clone()
    new[:batch] = teacher
    return new
