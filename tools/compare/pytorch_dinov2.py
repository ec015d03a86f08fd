"""A DINOv2 training step in PyTorch (timm's ViT), the baseline that
tools/compare/pytorch_ssl_train.py --method dinov2 times next to ours
(src/ssl_methods/dinov2.c, `bench_train_step --mode method --method dinov2`).

LightlyTrain's dinov2 recipe as ours runs it: a ViT student and its EMA
teacher (momentum 0.992), one DINO/iBOT head (hidden 2048, bottleneck 256,
a weight-normalised last layer with a trained weight_g) shared by the class
tokens and the masked patch tokens; the teacher (no gradient) sees the two
global views, the student the global views with iBOT masks (a learnable mask
token replaces the masked patch embeddings) and the 8 local views; DINO on
the class tokens + iBOT on the masked patches + 0.1 KoLeo on the student's
global class tokens, softmax centres (momentum 0.9); AdamW with weight decay
on weights only; gradients clipped at norm 3.

The masks follow DINOv2's collate: of the 2 B global crops int(2 B x 0.5)
are masked, the i-th with int(P x uniform(r_i, r_i+1)) patches for r =
linspace(0.1, 0.5); random patches rather than DINOv2's rectangles (the
same counts, so the same arithmetic). A few sets are made on the device
before the timed steps and cycled, as DINOv2's data loader workers would
make them off the training loop. In PyTorch's favour: one weight-decay
group and one no-decay group instead of LightlyTrain's layer-wise lr
decay groups (their multipliers cost launches, not arithmetic), and the
EMA update as foreach ops (lightly's update_momentum loops per tensor).
"""
import math

import torch
import torch.nn.functional as F

# name: (patch, width, depth, heads), as src/nn/vit.c's presets.
VITS = {"vit_t14": (14, 192, 12, 3), "vit_s14": (14, 384, 12, 6),
        "vit_b14": (14, 768, 12, 12), "vit_l14": (14, 1024, 24, 16)}
MASK_SETS = 4
TEACHER_TEMP, STUDENT_TEMP, CENTER_MOMENTUM, EMA_MOMENTUM = 0.04, 0.1, 0.9, 0.992
KOLEO_WEIGHT, KOLEO_EPS = 0.1, 1e-8


def dinov2_vit(name, image_size):
    """timm's VisionTransformer with DINOv2's block (LayerScale 1e-5),
    any multiple of the patch size as input (the local views)."""
    from timm.models.vision_transformer import VisionTransformer
    patch, width, depth, heads = VITS[name]
    return VisionTransformer(img_size=image_size, patch_size=patch, embed_dim=width, depth=depth,
                             num_heads=heads, mlp_ratio=4.0, init_values=1e-5, num_classes=0,
                             global_pool="", dynamic_img_size=True)


class DinoHead(torch.nn.Module):
    """DINO's head (DINO's and DINOv2's): MLP, L2 normalisation, a
    weight-normalised last layer whose weight_g is 1 (trained in DINOv2)."""

    def __init__(self, dim, prototypes, hidden=2048, bottleneck=256, train_weight_g=False):
        super().__init__()
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden),
            torch.nn.GELU(), torch.nn.Linear(hidden, bottleneck))
        self.last = torch.nn.utils.weight_norm(torch.nn.Linear(bottleneck, prototypes, bias=False))
        self.last.weight_g.data.fill_(1.0)
        self.last.weight_g.requires_grad = train_weight_g

    def forward(self, x):
        return self.last(F.normalize(self.mlp(x), dim=-1))


class Dinov2Network(torch.nn.Module):
    def __init__(self, model, image_size, prototypes):
        super().__init__()
        self.vit = dinov2_vit(model, image_size)
        self.head = DinoHead(self.vit.embed_dim, prototypes, train_weight_g=True)
        self.mask_token = torch.nn.Parameter(torch.zeros(1, self.vit.embed_dim))

    def tokens(self, images, masks=None):
        """The normalised tokens (B, 1 + P, D); masked patch embeddings
        (masks (B, h, w) bool) replaced by the mask token."""
        vit = self.vit
        x = vit.patch_embed(images)  # (B, h, w, D) with dynamic_img_size
        if masks is not None:
            x = torch.where(masks.unsqueeze(-1), self.mask_token.to(x.dtype), x)
        x = vit.norm_pre(vit.patch_drop(vit._pos_embed(x)))
        return vit.norm(vit.blocks(x))


def make_masks(crops, grid, generator, device):
    """One set: masks (crops, grid, grid) bool and each masked patch's weight
    1 / (masked patches of its crop), in mask order."""
    patches, masked_crops = grid * grid, int(crops * 0.5)
    ratios = torch.linspace(0.1, 0.5, masked_crops + 1)
    masks = torch.zeros(crops, patches, dtype=torch.bool)
    order = torch.randperm(crops, generator=generator)
    for i in range(masked_crops):
        low, high = ratios[i].item(), ratios[i + 1].item()
        count = int(patches * (low + torch.rand(1, generator=generator).item() * (high - low)))
        masks[order[i], torch.randperm(patches, generator=generator)[:count]] = True
    per_crop = masks.sum(dim=1, keepdim=True).clamp(min=1).float()
    weights = (1.0 / per_crop).expand(-1, patches)[masks]
    return masks.view(crops, grid, grid).to(device), weights.to(device)


class Dinov2:
    def __init__(self, args, device):
        if args.model not in VITS:
            raise SystemExit(f"--method dinov2 needs a ViT ({', '.join(VITS)}), got {args.model}")
        self.student = Dinov2Network(args.model, args.image_size, args.prototypes).to(device)
        self.teacher = Dinov2Network(args.model, args.image_size, args.prototypes).to(device)
        self.teacher.load_state_dict(self.student.state_dict())  # weight_norm defeats deepcopy
        for p in self.teacher.parameters():
            p.requires_grad = False
        decay = [p for n, p in self.student.named_parameters() if p.ndim > 1 and "gamma" not in n]
        other = [p for n, p in self.student.named_parameters() if not (p.ndim > 1 and "gamma" not in n)]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.04}, {"params": other, "weight_decay": 0.0}],
            lr=0.004 * math.sqrt(args.batch_size / 1024))
        self.clip_norm = 3.0
        self.center = torch.zeros(1, args.prototypes, device=device)
        self.patch_center = torch.zeros(1, args.prototypes, device=device)
        patch = VITS[args.model][0]
        generator = torch.Generator().manual_seed(0)
        self.mask_sets = [make_masks(2 * args.batch_size, args.image_size // patch, generator,
                                     device) for _ in range(MASK_SETS)]
        self.step = 0

    def loss(self, views):
        batch = views[0].shape[0]
        global_views, local_views = torch.cat(views[:2]), torch.cat(views[2:])
        masks, weights = self.mask_sets[self.step % MASK_SETS]
        self.step += 1
        flat = masks.flatten(1)
        with torch.no_grad():
            tokens = self.teacher.tokens(global_views)
            out = self.teacher.head(torch.cat([tokens[:, 0], tokens[:, 1:][flat]])).float()
            cls_out, patch_out = out[:2 * batch], out[2 * batch:]
            cls_targets = torch.softmax((cls_out - self.center) / TEACHER_TEMP, dim=-1)
            patch_targets = torch.softmax((patch_out - self.patch_center) / TEACHER_TEMP, dim=-1)
            self.center.mul_(CENTER_MOMENTUM).add_(
                (1 - CENTER_MOMENTUM) * cls_out.mean(dim=0, keepdim=True))
            self.patch_center.mul_(CENTER_MOMENTUM).add_(
                (1 - CENTER_MOMENTUM) * patch_out.mean(dim=0, keepdim=True))
        tokens = self.student.tokens(global_views, masks)
        local_cls = self.student.tokens(local_views)[:, 0]
        features = tokens[:, 0]
        out = self.student.head(torch.cat([features, local_cls, tokens[:, 1:][flat]])).float()
        cls_rows = 2 * batch + local_cls.shape[0]
        log_probs = torch.log_softmax(out[:cls_rows] / STUDENT_TEMP, dim=-1)
        teacher = cls_targets.chunk(2)
        student = log_probs.chunk(cls_rows // batch)
        # each student view against the teacher's other global view(s)
        dino = sum(-(teacher[t] * student[s]).sum(dim=-1).mean()
                   for t in range(2) for s in range(len(student)) if s != t)
        dino = dino / (2 + max(2 * (len(student) - 2), 1))  # LightlyTrain's term count
        patch_log_probs = torch.log_softmax(out[cls_rows:] / STUDENT_TEMP, dim=-1)
        ibot = -((patch_targets * patch_log_probs).sum(dim=-1) * weights).sum() / (2 * batch)
        koleo = 0.0
        for view in F.normalize(features.float(), dim=-1, eps=KOLEO_EPS).chunk(2):
            similarity = view @ view.t()
            similarity.fill_diagonal_(-2)
            neighbours = view[similarity.argmax(dim=1)]
            distance = F.pairwise_distance(view, neighbours, p=2, eps=KOLEO_EPS)
            koleo = koleo - (distance + KOLEO_EPS).log().mean()
        return dino + ibot + KOLEO_WEIGHT * koleo

    @torch.no_grad()
    def after_step(self):
        teacher = [p for p in self.teacher.parameters()]
        student = [p.detach() for p in self.student.parameters()]
        torch._foreach_mul_(teacher, EMA_MOMENTUM)
        torch._foreach_add_(teacher, student, alpha=1 - EMA_MOMENTUM)
