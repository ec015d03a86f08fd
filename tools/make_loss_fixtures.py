#!/usr/bin/python3
"""Writes tests/fixtures/nt_xent.safetensors: PyTorch references for SimCLR's
NT-Xent loss (src/ssl_methods/nt_xent.h), checked by tests/test_nt_xent.c;
and byol_loss, vicreg_loss, barlow_twins_loss.safetensors for
tests/test_ssl_losses.c (see write_byol, write_vicreg, write_barlow_twins and
tests/fixtures/README.md).

    /usr/bin/python3 tools/make_loss_fixtures.py --out tests/fixtures [--lightly /tmp/lightly]

The reference is lightly's NTXentLoss (memory bank off, one device) when the
lightly package can be imported (e.g. `pip install --no-deps --target
/tmp/lightly lightly`, passed with --lightly); the script always also runs its
own written-out version of the same formula and fails when the two disagree.
Without lightly it uses the written-out version alone (the metadata says
which). Safetensors writing and fixture init come from tools/make_fixtures.py.

For every case C (named n<N>_d<D>_t<temperature>):
    C/out0, C/out1       (N, D) F32   the two views' projections (fixture init
                                      "nt_xent/C/out0" and "nt_xent/C/out1";
                                      in correlated cases out1 = out0 + 0.8 u)
    C/temperature        () F32
    C/loss               () F64       loss of the float32 inputs computed in float64
    C/grad0, C/grad1     (N, D) F64   d loss / d out0, d out1 (float64)
    f32err/C/loss, f32err/C/grad0, f32err/C/grad1  () F64
                                      max |float32 result - float64 result|: the
                                      rounding error of a correct float32 run
    check/u              (16,) F32    as in every fixture file
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, fixture_value  # noqa: E402


def parse_fixture_args(doc):
    """--out and --lightly for a fixture script; single-threaded, deterministic
    torch; lightly's folder (when given) on the import path."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    parser.add_argument("--lightly", help="folder holding the lightly package (optional)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.lightly:
        sys.path.insert(0, args.lightly)
    return args


def lightly_loss(class_name):
    """(lightly.loss.<class_name>, lightly's version), or (None, None) when
    lightly is not importable (the written-out formulas are used then)."""
    try:
        import lightly
        import lightly.loss
    except ImportError as error:
        print(f"lightly not importable ({error}); using the written-out formula", file=sys.stderr)
        return None, None
    return getattr(lightly.loss, class_name), lightly.__version__


def require_lightly():
    """The lightly package, or exit saying how to pass it (scripts that need it)."""
    try:
        import lightly
    except ImportError as error:
        raise SystemExit(f"lightly is needed ({error}); pass --lightly /tmp/lightly")
    return lightly

# (N, D, temperature, correlated views): N = 1 (loss 0: one logit per row),
# odd sizes, SimCLR's default t = 0.1 and others.
CASES = [
    (1, 8, 0.1, False),
    (2, 5, 0.1, False),
    (8, 16, 0.1, True),
    (6, 33, 0.5, False),
    (24, 40, 0.07, True),
]


def case_name(batch, dim, temperature):
    return f"n{batch}_d{dim}_t{temperature:g}"


def nt_xent_written_out(out0, out1, temperature):
    """The formula of src/ssl_methods/nt_xent.h written out in torch."""
    batch = out0.shape[0]
    z = torch.cat([torch.nn.functional.normalize(out0, dim=1),
                   torch.nn.functional.normalize(out1, dim=1)], dim=0)
    logits = z @ z.t() / temperature
    eye = torch.eye(2 * batch, dtype=torch.bool)
    logits = logits.masked_fill(eye, float("-inf"))
    labels = (torch.arange(2 * batch) + batch) % (2 * batch)
    log_probs = torch.log_softmax(logits, dim=1)
    return -log_probs[torch.arange(2 * batch), labels].mean()


def loss_and_grads(loss_fn, out0, out1, dtype):
    a = torch.from_numpy(out0).to(dtype).requires_grad_(True)
    b = torch.from_numpy(out1).to(dtype).requires_grad_(True)
    loss = loss_fn(a, b)
    loss.backward()
    return loss.detach().double().numpy(), a.grad.double().numpy(), b.grad.double().numpy()


# ---- BYOL, VICReg, Barlow Twins ---------------------------------------------------

# (N, D) per case; N = 2 is the smallest batch VICReg and Barlow Twins accept.
SSL_CASES = [(2, 5), (7, 16), (16, 33), (24, 40)]


def spread_columns(x):
    """Scales column j of x by 0.5 .. 4 so that some feature std lies below 1
    and some above (VICReg's variance hinge both active and inactive)."""
    scale = np.linspace(0.5, 4.0, x.shape[1]).astype(np.float32)
    return (x * scale).astype(np.float32)


def grads_of(loss_fn, inputs, needs_grad, dtype):
    """loss_fn(*inputs) and d loss / d input for the inputs flagged in needs_grad."""
    tensors = [torch.from_numpy(x).to(dtype).requires_grad_(flag)
               for x, flag in zip(inputs, needs_grad)]
    loss = loss_fn(*tensors)
    loss.backward()
    grads = [t.grad.double().numpy() for t, flag in zip(tensors, needs_grad) if flag]
    return [loss.detach().double().numpy()] + grads


def write_ssl_file(out, file_name, inputs_of, reference, written, input_names, grad_names,
                   needs_grad, reference_name):
    """One fixture file: per case the float32 inputs, the float64 loss and
    gradients from reference, their f32err, cross-checked against written."""
    safe = SafeFile()
    add_check(safe)
    for batch, dim in SSL_CASES:
        name = f"n{batch}_d{dim}"
        inputs = inputs_of(name, batch, dim)
        truth = grads_of(reference, inputs, needs_grad, torch.float64)
        single = grads_of(reference, inputs, needs_grad, torch.float32)
        check = grads_of(written, inputs, needs_grad, torch.float64)
        labels = ["loss"] + grad_names
        for label, a, b in zip(labels, truth, check):
            difference = float(np.max(np.abs(a - b)))
            if difference > 1e-9 * max(1.0, float(np.max(np.abs(a)))):
                raise SystemExit(f"{file_name} {name}/{label}: written-out formula differs "
                                 f"from the reference by {difference:g}")
        for label, x in zip(input_names, inputs):
            safe.add(f"{name}/{label}", x)
        for label, value, value32 in zip(labels, truth, single):
            safe.add(f"{name}/{label}", value)
            safe.add(f"f32err/{name}/{label}", np.float64(np.max(np.abs(value32 - value))))
        print(f"{file_name} {name}: loss {float(truth[0]):.9f}, f32err loss "
              f"{float(np.abs(single[0] - truth[0])):.3g}")
    metadata = {
        "generator": "tools/make_loss_fixtures.py",
        "command": "/usr/bin/python3 tools/make_loss_fixtures.py --out tests/fixtures "
                   "--lightly /tmp/lightly",
        "reference": reference_name,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    path = os.path.join(out, file_name)
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes ({reference_name})")


def byol_written_out(p0, p1, z0, z1):
    """src/ssl_methods/byol_loss.h: the BYOL paper's 2 - 2 cos, both directions."""
    def term(p, z):
        n = torch.nn.functional.normalize
        return ((n(p, dim=1) - n(z, dim=1)) ** 2).sum(dim=1).mean()
    return term(p0, z1) + term(p1, z0)


def write_byol(out):
    """byol_loss.safetensors: C/p0, C/p1, C/z0, C/z1 inputs; C/loss, C/grad_p0,
    C/grad_p1 (the targets z get no gradient). The reference is the written-out
    paper formula; with lightly it is also checked against 4 + 4 x lightly's
    0.5 (NegativeCosineSimilarity(p0, z1) + NegativeCosineSimilarity(p1, z0))."""
    def inputs_of(name, batch, dim):
        z0 = fixture_value(f"byol/{name}/z0", (batch, dim), 0.0, 1.0)
        z1 = fixture_value(f"byol/{name}/z1", (batch, dim), 0.0, 1.0)
        # predictions near their targets (as in training), plus noise
        p0 = (z1 + np.float32(0.7) * fixture_value(f"byol/{name}/p0", (batch, dim), 0.0, 1.0))
        p1 = (z0 + np.float32(0.7) * fixture_value(f"byol/{name}/p1", (batch, dim), 0.0, 1.0))
        return [p0.astype(np.float32), p1.astype(np.float32), z0, z1]
    reference, reference_name = byol_written_out, "written out (BYOL paper, 2 - 2 cos)"
    negative_cosine, _ = lightly_loss("NegativeCosineSimilarity")
    if negative_cosine is not None:
        criterion = negative_cosine()

        def lightly_scaled(p0, p1, z0, z1):
            return 4.0 + 4.0 * (0.5 * (criterion(p0, z1) + criterion(p1, z0)))
        reference = lightly_scaled
        reference_name = "lightly NegativeCosineSimilarity, 4 + 4 x symmetric mean"
    write_ssl_file(out, "byol_loss.safetensors", inputs_of, reference, byol_written_out,
                   ["p0", "p1", "z0", "z1"], ["grad_p0", "grad_p1"],
                   [True, True, False, False], reference_name)


def two_views(prefix):
    def inputs_of(name, batch, dim):
        out0 = spread_columns(fixture_value(f"{prefix}/{name}/out0", (batch, dim), 0.0, 1.0))
        noise = spread_columns(fixture_value(f"{prefix}/{name}/out1", (batch, dim), 0.0, 1.0))
        return [out0, (out0 + np.float32(0.8) * noise).astype(np.float32)]
    return inputs_of


def vicreg_written_out(a, b, lam=25.0, mu=25.0, nu=1.0, eps=1e-4):
    """src/ssl_methods/vicreg_loss.h written out (lightly's VICRegLoss defaults)."""
    batch, dim = a.shape
    invariance = ((a - b) ** 2).mean()

    def variance(x):
        return torch.relu(1.0 - torch.sqrt(x.var(dim=0) + eps)).mean()

    def covariance(x):
        xc = x - x.mean(dim=0)
        cov = xc.t() @ xc / (batch - 1)
        off = cov - torch.diag(torch.diagonal(cov))
        return (off ** 2).sum() / dim
    return (lam * invariance + mu * 0.5 * (variance(a) + variance(b))
            + nu * (covariance(a) + covariance(b)))


def write_vicreg(out):
    """vicreg_loss.safetensors: C/out0, C/out1; C/loss, C/grad0, C/grad1."""
    reference, reference_name = vicreg_written_out, "written out (VICReg defaults)"
    loss_class, version = lightly_loss("VICRegLoss")
    if loss_class is not None:
        reference = loss_class()
        reference_name = f"lightly {version} VICRegLoss()"
    write_ssl_file(out, "vicreg_loss.safetensors", two_views("vicreg"), reference,
                   vicreg_written_out, ["out0", "out1"], ["grad0", "grad1"], [True, True],
                   reference_name)


def barlow_twins_written_out(a, b, lam=5e-3):
    """src/ssl_methods/barlow_twins_loss.h written out: batch-norm each view
    (biased variance, eps 1e-5, as F.batch_norm in training)."""
    batch = a.shape[0]

    def normalize(x):
        xc = x - x.mean(dim=0)
        return xc / torch.sqrt((xc ** 2).mean(dim=0) + 1e-5)
    c = normalize(a).t() @ normalize(b) / batch
    diagonal = torch.diagonal(c)
    return ((diagonal - 1.0) ** 2).sum() + lam * ((c ** 2).sum() - (diagonal ** 2).sum())


def write_barlow_twins(out):
    """barlow_twins_loss.safetensors: C/out0, C/out1; C/loss, C/grad0, C/grad1."""
    reference, reference_name = barlow_twins_written_out, "written out (Barlow Twins)"
    loss_class, version = lightly_loss("BarlowTwinsLoss")
    if loss_class is not None:
        reference = loss_class()
        reference_name = f"lightly {version} BarlowTwinsLoss()"
    write_ssl_file(out, "barlow_twins_loss.safetensors", two_views("barlow_twins"), reference,
                   barlow_twins_written_out, ["out0", "out1"], ["grad0", "grad1"], [True, True],
                   reference_name)


def main():
    args = parse_fixture_args(__doc__)
    nt_xent_class, version = lightly_loss("NTXentLoss")
    reference_name = ("written out (lightly not importable)" if nt_xent_class is None
                      else f"lightly {version} NTXentLoss")

    safe = SafeFile()
    add_check(safe)
    for batch, dim, temperature, correlated in CASES:
        name = case_name(batch, dim, temperature)
        out0 = fixture_value(f"nt_xent/{name}/out0", (batch, dim), 0.0, 1.0)
        out1 = fixture_value(f"nt_xent/{name}/out1", (batch, dim), 0.0, 1.0)
        if correlated:
            out1 = (out0 + np.float32(0.8) * out1).astype(np.float32)
        written = lambda a, b, t=temperature: nt_xent_written_out(a, b, t)  # noqa: E731
        reference = written
        if nt_xent_class is not None:
            reference = nt_xent_class(temperature=temperature)
        truth = loss_and_grads(reference, out0, out1, torch.float64)
        single = loss_and_grads(reference, out0, out1, torch.float32)
        check = loss_and_grads(written, out0, out1, torch.float64)
        for label, a, b in zip(("loss", "grad0", "grad1"), truth, check):
            difference = float(np.max(np.abs(a - b)))
            if difference > 1e-12:
                raise SystemExit(f"{name}/{label}: written-out formula differs from the "
                                 f"reference by {difference:g}")
        safe.add(f"{name}/out0", out0)
        safe.add(f"{name}/out1", out1)
        safe.add(f"{name}/temperature", np.float32(temperature))
        for label, value, value32 in zip(("loss", "grad0", "grad1"), truth, single):
            safe.add(f"{name}/{label}", value)
            safe.add(f"f32err/{name}/{label}", np.float64(np.max(np.abs(value32 - value))))
        print(f"{name}: loss {float(truth[0]):.9f}, max |grad| "
              f"{max(np.abs(truth[1]).max(), np.abs(truth[2]).max()):.3g}, f32err loss "
              f"{float(np.abs(single[0] - truth[0])):.3g}")

    metadata = {
        "generator": "tools/make_loss_fixtures.py",
        "command": "/usr/bin/python3 tools/make_loss_fixtures.py --out tests/fixtures "
                   "--lightly /tmp/lightly",
        "reference": reference_name,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "nt_xent.safetensors")
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes ({reference_name})")
    for write in (write_byol, write_vicreg, write_barlow_twins):
        write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
