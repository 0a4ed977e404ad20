"""Plots on request: the corpus's clusters, and predicted vs measured throughput."""

from __future__ import annotations

import os

from .errors import AdviceError


def plot_all(adv, features, outdir):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AdviceError("plots need matplotlib; install it with: scripts/setup-python.sh")
    try:
        os.makedirs(outdir, exist_ok=True)
    except OSError as e:
        raise AdviceError(f"{outdir}: cannot create the plot directory: {e.strerror}")
    written = []
    W = adv.workloads
    fx = adv.cluster_features[0]
    fy = adv.cluster_features[1] if len(adv.cluster_features) > 1 else adv.cluster_features[0]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for c in range(adv.k):
        names = [w for w, cc in adv.cluster_of.items() if cc == c]
        ax.scatter(W.loc[names, fx], W.loc[names, fy], label=f"cluster {c}", s=50)
        for n in names:
            ax.annotate(n, (W.loc[n, fx], W.loc[n, fy]), fontsize=7)
    ax.scatter([features[fx]], [features[fy]], marker="*", s=250, c="k", label="this workload")
    ax.set_xlabel(fx)
    ax.set_ylabel(fy)
    ax.legend(fontsize=8)
    ax.set_title("corpus workloads by cluster")
    written += _save(fig, plt, outdir, "clusters")
    pred = adv.scores.get("predictions")
    if pred is not None:
        fig, ax = plt.subplots(figsize=(5, 5))
        for name in ("knn_clustered", "boosted"):
            ax.scatter(pred["measured"], pred[name], s=10, label=name, alpha=0.7)
        lo, hi = pred["measured"].min(), pred["measured"].max()
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set_xlabel("measured log10 bytes/s")
        ax.set_ylabel("predicted log10 bytes/s (workload held out)")
        ax.legend(fontsize=8)
        written += _save(fig, plt, outdir, "predicted-vs-measured")
    return written


def _save(fig, plt, outdir, name):
    out = []
    for ext in ("png", "svg"):
        path = os.path.join(outdir, f"{name}.{ext}")
        try:
            fig.savefig(path, bbox_inches="tight")
        except OSError as e:
            raise AdviceError(f"{path}: cannot write the plot: {e.strerror}")
        out.append(path)
    plt.close(fig)
    return out
