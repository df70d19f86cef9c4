"""Virtual-worker throughput: 8 workers × the DEAHES CNN at batch 64, one local step each, with SGD
and with AdaHessian (one Hutchinson probe), this project against a plain PyTorch loop over the
workers, in one process. Prints worker-steps per second and, last, the ratios (ours / PyTorch).

    python -m benchmarks.workers [--reps 10] [--data PATH] [--torch-path SITE_PACKAGES]

Ours (:func:`ours`): the elastic-averaging local step (``algos.elastic``) for one worker, batched
over the 8 workers with ``jax.vmap`` and with ``jax.lax.map``; both are reported and the faster is
compared. The convolutions are ``sim.models.Conv2D``'s default: oneDNN's (``sim.native``) where
built, else im2col; the first line says which. PyTorch (:func:`torch_loop`): the same network, a
Python loop over 8 models. PyTorch is optional (Debian's ``python3-torch`` or a CPU wheel);
without it only our numbers are printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import elastic as ea
from delaylab.sim.data import load_mnist_format
from delaylab.sim.engine import WorkerOracle
from delaylab.sim import native
from delaylab.sim.models import cnn_classifier, conv_impl_for

WORKERS, BATCH = 8, 64


def _best(fn, reps: int) -> float:
    """Seconds per call: the median of ``reps`` timed calls after one warm-up (ours and PyTorch's)."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def ours(problem, reps: int) -> dict:
    """Worker-steps per second of the elastic-averaging local step, per optimiser and batching
    (each worker has its own parameters, so the convolutions cannot share a kernel)."""
    out = {}
    for name, alg in (("SGD", ea.easgd(learning_rate=0.01)), ("AdaHessian", ea.eahes(learning_rate=0.01))):
        point = alg.worker.start(alg.hparams, problem.x0)
        points = jax.tree.map(lambda x: jnp.broadcast_to(x, (WORKERS,) + x.shape), point)
        hp = {k: jnp.asarray(v) for k, v in alg.hparams.items()}

        def one(pt, w, k):
            return alg.worker.job(hp, pt, WorkerOracle(problem.fns, problem.data, w), k)

        keys = jax.random.split(jax.random.key(0), WORKERS)
        ws = jnp.arange(WORKERS)
        vm = jax.jit(lambda p: jax.vmap(one)(p, ws, keys))
        lm = jax.jit(lambda p: jax.lax.map(lambda a: one(*a), (p, ws, keys)))
        for how, f in (("lax.map", lm), ("vmap", vm)):
            t0 = time.perf_counter()
            out[(name, how)] = WORKERS / _best(lambda: f(points), reps)
            print(f"  ours    {name:10s} {how:8s} {out[(name, how)]:8.1f} worker-steps/s "
                  f"({time.perf_counter() - t0:.0f} s with the compile)", flush=True)
    return out


def torch_loop(images: np.ndarray, labels: np.ndarray, reps: int, torch_path: str | None = None) -> dict | None:
    """The same network in PyTorch (5×5 convolutions with 32 and 64 channels, 2×2 max-pools, a
    128-unit head), a Python loop over 8 models; ``None`` without PyTorch. SGD is ``backward`` and
    an in-place update; AdaHessian is the reference recipe: gradients with ``create_graph=True``,
    H z by a second ``autograd.grad``, |z ⊙ Hz| averaged over each kernel's spatial axes (OIHW:
    2, 3), Adam-style moments."""
    if torch_path is not None:  # a PyTorch installed elsewhere (another venv's site-packages), searched last
        sys.path.append(torch_path)
    try:
        import torch
    except ImportError:
        for path in ("/usr/lib/python3/dist-packages",):  # Debian's python3-torch
            if os.path.isdir(os.path.join(path, "torch")) and path not in sys.path:
                sys.path.append(path)
        try:
            import torch
        except ImportError:
            return None
    import torch.nn.functional as F

    torch.set_num_threads(os.cpu_count() or 1)  # the same cores XLA uses
    torch.manual_seed(0)

    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 5, padding=2), torch.nn.MaxPool2d(2), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 5, padding=2), torch.nn.MaxPool2d(2), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Linear(64 * (images.shape[1] // 4) * (images.shape[2] // 4), 128),
            torch.nn.ReLU(), torch.nn.Linear(128, 10))

    models = [net() for _ in range(WORKERS)]
    gen = torch.Generator().manual_seed(0)
    # through the buffer protocol, not torch's NumPy bridge (Debian's torch 1.13 was built against NumPy 1.x)
    X = torch.frombuffer(bytearray(np.ascontiguousarray(images, np.float32).tobytes()), dtype=torch.float32)
    X = X.reshape(images.shape[0], 1, images.shape[1], images.shape[2])
    Y = torch.frombuffer(bytearray(np.ascontiguousarray(labels, np.int64).tobytes()), dtype=torch.int64)
    state = [{"m": [torch.zeros_like(p) for p in m.parameters()], "v": [torch.zeros_like(p) for p in m.parameters()],
              "t": 0} for m in models]

    def sgd_step():
        for m in models:
            idx = torch.randint(0, len(Y), (BATCH,), generator=gen)
            loss = F.cross_entropy(m(X[idx]), Y[idx])
            m.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in m.parameters():
                    p -= 0.01 * p.grad

    def adahessian_step():
        for m, st in zip(models, state):
            idx = torch.randint(0, len(Y), (BATCH,), generator=gen)
            params = list(m.parameters())
            loss = F.cross_entropy(m(X[idx]), Y[idx])
            grads = torch.autograd.grad(loss, params, create_graph=True)
            zs = [torch.randint_like(p, 2) * 2 - 1 for p in params]
            hz = torch.autograd.grad(grads, params, grad_outputs=zs)
            st["t"] += 1
            t = st["t"]
            with torch.no_grad():
                for p, g, z, h, mm, vv in zip(params, grads, zs, hz, st["m"], st["v"]):
                    d = (z * h).abs()
                    if d.dim() == 4:
                        d = d.mean(dim=(2, 3), keepdim=True).expand_as(d)
                    mm.mul_(0.9).add_(g, alpha=0.1)
                    vv.mul_(0.999).addcmul_(d, d, value=0.001)
                    den = (vv.sqrt() / (1 - 0.999 ** t) ** 0.5) + 1e-4
                    p -= 0.01 * ((mm / (1 - 0.9 ** t)) / den + 5e-4 * p)

    out = {}
    for name, step in (("SGD", sgd_step), ("AdaHessian", adahessian_step)):
        out[name] = WORKERS / _best(step, reps)  # step() returns None: nothing for jax to wait on
    out["threads"] = torch.get_num_threads()
    out["version"] = torch.__version__
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--data", default=None, help="MNIST-format data (default: the usual places)")
    ap.add_argument("--torch-path", default=None,
                    help="site-packages folder of a PyTorch to compare against (default: this environment's, "
                         "else Debian's python3-torch)")
    args = ap.parse_args(argv)
    if args.torch_path is not None and not os.path.isdir(os.path.join(args.torch_path, "torch")):
        ap.error(f"--torch-path {args.torch_path!r}: no torch package there (expected a site-packages folder)")
    ds = load_mnist_format(args.data)
    n = 8000
    problem = cnn_classifier(ds.x_train[:n], ds.y_train[:n], ds.x_test[:500], ds.y_test[:500], num_workers=WORKERS,
                             batch_size=BATCH, eval_size=500, dtype=np.float32)
    print(f"{WORKERS} workers × CNN on {ds.name} {ds.x_train.shape[1:]}, batch {BATCH}; jax {jax.__version__}, "
          f"{jax.devices()[0].platform}; convolutions: {conv_impl_for('auto', np.float32)} ({native.status()})",
          flush=True)
    mine = ours(problem, args.reps)
    ref = torch_loop(ds.x_train[:n], ds.y_train[:n], args.reps, args.torch_path)
    if ref is None:
        print("  PyTorch not installed (Debian: python3-torch): no ratio")
        return 0
    for name in ("SGD", "AdaHessian"):
        print(f"  PyTorch {name:10s} loop     {ref[name]:8.1f} worker-steps/s (torch {ref['version']}, {ref['threads']} threads)")
    for name in ("SGD", "AdaHessian"):
        best = max(v for (m, _), v in mine.items() if m == name)
        print(f"ratio ours / PyTorch, {name}: {best / ref[name]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
