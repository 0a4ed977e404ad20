"""Bang's pipeline, one function per step.

1. ``rank_features``: correlation ranking (Bang's "min-max" selection: strongest correlation
   with throughput first, then among the features least correlated with the last pick, the one
   most correlated with throughput).
2. ``backward_selection``: sequential backward selection; each subset is clustered with KMeans
   and scored by silhouette / Davies-Bouldin ("combined score").
3. ``choose_k``: the number of clusters with the best combined score among those whose clusters
   each hold enough workloads to train on.
4. ``fit_knn``: per-cluster KNN regression of log throughput (standardised inputs, k chosen by
   cross-validation).
5. ``fit_boosted``: HistGradientBoosting on all runs, the stronger baseline.
6. ``recommend``: predict every setting of the grid, best first, with the gain over the current.
7. ``validate``: leave whole workloads out, report R² and the regret of the advice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.metrics import davies_bouldin_score, r2_score, silhouette_score
from sklearn.model_selection import GroupKFold, KFold
from sklearn.neighbors import KNeighborsRegressor, NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from . import grid
from .errors import AdviceError
from .features import WORKLOAD_FEATURES

SEED = 14
FEATURES = list(WORKLOAD_FEATURES)


# --- tables -----------------------------------------------------------------------------------


def to_frame(records):
    """One row per run: workload features, encoded settings, log10 throughput."""
    if not records:
        raise AdviceError("the corpus is empty: collect runs with `numaio advise collect` or "
                          "use the shipped corpus")
    rows = []
    for r in records:
        row = {f: float(r["features"][f]) for f in FEATURES}
        row.update(grid.encode_settings(r["settings"]))
        row["workload"] = r["workload"]
        row["source"] = r.get("source", "measured")
        row["log_tput"] = math.log10(float(r["throughput"]))
        rows.append(row)
    return pd.DataFrame(rows)


def setting_columns():
    return list(grid.encode_settings(grid.DEFAULT))


def workload_table(df):
    """One row per workload (its features are the same in each of its runs)."""
    return df.groupby("workload")[FEATURES].first()


# --- 1. correlation ranking -----------------------------------------------------------------


def rank_features(df, features=None, target="log_tput", pool=10):
    """Features ordered by Bang's min-max correlation rule; constant features are dropped."""
    features = [f for f in (features or FEATURES) if df[f].nunique() > 1]
    if not features:
        return []
    corr = df[features + [target]].corr().abs().fillna(0.0)
    to_target = corr[target]
    chosen = [max(features, key=lambda f: (to_target[f], f))]
    left = [f for f in features if f not in chosen]
    while left:
        last = chosen[-1]
        least = sorted(left, key=lambda f: (corr.loc[last, f], f))[:pool]
        pick = max(least, key=lambda f: (to_target[f], f))
        chosen.append(pick)
        left.remove(pick)
    return chosen


# --- 2. backward selection with KMeans --------------------------------------------------------


def cluster_score(X, k, seed=SEED):
    """KMeans on standardised X: labels, silhouette, Davies-Bouldin and their ratio."""
    Xs = StandardScaler().fit_transform(X)
    if len(np.unique(Xs, axis=0)) < k:
        return None
    km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(Xs)
    labels = km.labels_
    if len(set(labels)) < 2:
        return None
    sil = silhouette_score(Xs, labels)
    dbi = davies_bouldin_score(Xs, labels)
    # Identical points in every cluster give a zero index: cap the ratio rather than divide by 0.
    combined = sil / max(dbi, 1e-3)
    return {"labels": labels, "silhouette": float(sil), "dbi": float(dbi),
            "combined": float(combined), "model": km}


def backward_selection(W, features, k, min_features=2):
    """Drop one feature at a time, keeping the subset whose clustering scores best.

    ``W`` has one row per workload. Returns the path: (features, score) per step, best last
    by combined score.
    """
    current = list(features)
    path = []
    s = cluster_score(W[current].values, k)
    if s is not None:
        path.append((list(current), s))
    while len(current) > min_features:
        best = None
        for f in current:
            subset = [g for g in current if g != f]
            sc = cluster_score(W[subset].values, k)
            if sc is not None and (best is None or sc["combined"] > best[1]["combined"]):
                best = (subset, sc)
        if best is None:
            break
        current = best[0]
        path.append(best)
    if not path:
        return None
    return max(path, key=lambda p: p[1]["combined"])


# --- 3. choice of k ---------------------------------------------------------------------------


def choose_k(W, features, ks=(2, 3, 4, 5, 6), min_workloads=2):
    """Best (k, features, score) whose every cluster has at least ``min_workloads`` workloads."""
    best = None
    tried = []
    for k in ks:
        if k * min_workloads > len(W):
            continue
        res = backward_selection(W, features, k)
        if res is None:
            continue
        subset, sc = res
        sizes = np.bincount(sc["labels"], minlength=k)
        ok = sizes.min() >= min_workloads
        tried.append({"k": k, "features": subset, "silhouette": sc["silhouette"],
                      "dbi": sc["dbi"], "combined": sc["combined"], "sizes": sizes.tolist(),
                      "eligible": bool(ok)})
        if ok and (best is None or sc["combined"] > best[2]["combined"]):
            best = (k, subset, sc)
    return best, tried


# --- 4. per-cluster KNN ------------------------------------------------------------------------


def _cv(groups, n):
    ng = len(set(groups))
    if ng >= 3:
        return GroupKFold(n_splits=min(5, ng)), groups
    return KFold(n_splits=max(2, min(5, n)), shuffle=True, random_state=SEED), None


def _knn_average(dist, idx, y, k):
    """Distance-weighted mean of the k nearest targets (exact matches alone when there are any,
    as scikit-learn's ``weights="distance"`` does)."""
    d, t = dist[:, :k], y[idx[:, :k]]
    exact = d <= 1e-12
    w = np.where(exact.any(axis=1, keepdims=True), exact.astype(float), 1.0 / np.maximum(d, 1e-12))
    return (w * t).sum(axis=1) / w.sum(axis=1)


def _weigh(X, w):
    return X * w


def fit_knn(df, inputs, ks=(1, 2, 3, 5, 7, 9, 13), weights=(1.0, 3.0, 10.0)):
    """KNN regression of log throughput on standardised inputs; k, and how much the workload
    features weigh against the settings in the distance, chosen by cross-validation.

    A heavy weight makes the neighbours the same settings on the most similar workloads; a
    light one, similar settings on any workload. Each fold queries its neighbours once per
    weight, for the largest k, and scores every k from them.
    """
    X, y = df[inputs].values.astype(float), df["log_tput"].values
    wcols = np.array([c in FEATURES for c in inputs])
    cv, groups = _cv(df["workload"].values, len(df))
    folds = list(cv.split(X, y, groups))
    kmax = max(1, min(len(tr) for tr, _ in folds))
    ks = sorted({min(k, kmax) for k in ks})
    pred = {(k, wt): np.zeros(len(y)) for k in ks for wt in weights}
    for tr, te in folds:
        sc = StandardScaler().fit(X[tr])
        Xtr, Xte = sc.transform(X[tr]), sc.transform(X[te])
        for wt in weights:
            w = np.where(wcols, wt, 1.0)
            nn = NearestNeighbors(n_neighbors=max(ks)).fit(Xtr * w)
            dist, idx = nn.kneighbors(Xte * w)
            for k in ks:
                pred[(k, wt)][te] = _knn_average(dist, idx, y[tr], k)
    # Ties go to the larger k (smoother) and the lighter weight.
    best_k, best_w = max(pred, key=lambda kw: (r2_score(y, pred[kw]) if len(y) > 1 else 0.0,
                                               kw[0], -kw[1]))
    w = np.where(wcols, best_w, 1.0)
    model = make_pipeline(StandardScaler(), FunctionTransformer(_weigh, kw_args={"w": w}),
                          KNeighborsRegressor(n_neighbors=best_k, weights="distance"))
    return model.fit(X, y), int(best_k)


def fit_boosted(df, inputs):
    """HistGradientBoosting on every run."""
    m = HistGradientBoostingRegressor(max_iter=150, learning_rate=0.1, random_state=SEED)
    return m.fit(df[inputs].values, df["log_tput"].values)


# --- the advisor ------------------------------------------------------------------------------


def feature_ranges(df):
    return {f: (float(df[f].min()), float(df[f].max())) for f in FEATURES}


def covers(ranges, features):
    """Whether a cluster's runs span the workload's every feature. A cluster of write-only
    workloads, say, knows nothing about reads: its KNN would copy write behaviour."""
    return all(lo - 1e-9 <= features[f] <= hi + 1e-9 for f, (lo, hi) in ranges.items())


@dataclass
class Advisor:
    """A trained advisor: clusters of workloads, a model per cluster, the boosted baseline."""

    k: int
    cluster_features: list
    ranking: list
    scaler: object
    kmeans: object
    knn: dict
    knn_k: dict
    knn_all: object
    ranges: dict
    boosted: object
    inputs: list
    model: str
    workloads: pd.DataFrame
    cluster_of: dict
    scores: dict = field(default_factory=dict)
    k_search: list = field(default_factory=list)

    def cluster(self, features):
        x = np.array([[features[f] for f in self.cluster_features]])
        return int(self.kmeans.predict(self.scaler.transform(x))[0])

    def predict(self, features, settings_list, model=None):
        """log10 throughput of each setting for a workload."""
        model = model or self.model
        rows = []
        for s in settings_list:
            row = {f: features[f] for f in FEATURES}
            row.update(grid.encode_settings(s))
            rows.append([row[c] for c in self.inputs])
        X = np.array(rows)
        if model == "boosted":
            return self.boosted.predict(X)
        c = self.cluster(features)
        if covers(self.ranges[c], features):
            return self.knn[c].predict(X)
        return self.knn_all.predict(X)

    def knn_model_for(self, features):
        c = self.cluster(features)
        return "cluster" if covers(self.ranges[c], features) else "unclustered"


def train(records, ks=(2, 3, 4, 5, 6), score=True, include_modelled=False):
    """Every step on a corpus; the model kept is the one with the better leave-workload-out
    R² (``score=False`` skips that scoring and keeps per-cluster KNN).

    Measured runs only, unless ``include_modelled``: then modelled runs join the training
    (never the validation). A corpus of modelled runs alone (one profile's, see
    ``train_modelled``) is scored on them, since there is nothing measured to score on.
    """
    if not include_modelled:
        given, records = records, [r for r in records
                                   if r.get("source", "measured") == "measured"]
        if given and not records:
            raise AdviceError("the corpus has no measured runs; modelled runs are used only "
                              "where asked (--include-modelled)")
    df = to_frame(records)
    if not (df["source"] == "measured").any():
        # Only modelled runs: they play the measured runs' part in clustering and scoring.
        df["source"] = "measured"
    if df["workload"].nunique() < 4:
        raise AdviceError(f"the corpus has {df['workload'].nunique()} workload(s); at least 4 "
                          "are needed to cluster and validate")
    W = workload_table(df[df["source"] == "measured"] if (df["source"] == "measured").any()
                       else df)
    ranking = rank_features(df)
    if len(ranking) < 2:
        raise AdviceError("the corpus's workloads do not differ in at least two features")
    best, tried = choose_k(W, ranking[:10], ks=ks)
    if best is None:
        raise AdviceError("no clustering of the corpus has at least 2 workloads per cluster; "
                          "collect more workload shapes")
    k, subset, sc = best
    scaler = StandardScaler().fit(W[subset].values)
    kmeans = sc["model"]
    # Modelled workloads take the cluster their features fall in; they never shape the clusters.
    W_all = workload_table(df)
    labels = kmeans.predict(scaler.transform(W_all[subset].values))
    cluster_of = dict(zip(W_all.index, (int(x) for x in labels)))
    df["cluster"] = df["workload"].map(cluster_of)
    # Bang's clusters stand for applications and his KNN sees only settable parameters; ours
    # hold several workload shapes each, so the workload features are inputs too.
    inputs = setting_columns() + FEATURES
    knn, knn_k = {}, {}
    for c in range(k):
        knn[c], knn_k[c] = fit_knn(df[df["cluster"] == c], inputs)
    knn_all, _ = fit_knn(df, inputs)
    ranges = {c: feature_ranges(df[df["cluster"] == c]) for c in range(k)}
    boosted = fit_boosted(df, inputs)
    adv = Advisor(k=k, cluster_features=subset, ranking=ranking, scaler=scaler, kmeans=kmeans,
                  knn=knn, knn_k=knn_k, knn_all=knn_all, ranges=ranges, boosted=boosted, inputs=inputs, model="knn",
                  workloads=W, cluster_of=cluster_of, k_search=tried)
    if score:
        adv.scores = cv_scores(df, adv)
        adv.model = better_model(adv.scores)
    return adv


def better_model(scores):
    """The model whose advice loses less on held-out workloads (mean regret); within 1 %,
    the one with the higher leave-workload-out R²."""
    rk, rb = scores["regret"]["knn_clustered"], scores["regret"]["boosted"]
    if abs(rk - rb) > 0.01:
        return "knn" if rk < rb else "boosted"
    return "boosted" if scores["boosted"] > scores["knn_clustered"] else "knn"


def _cv_predictions(df, adv, splits):
    """Out-of-fold predictions of per-cluster KNN, unclustered KNN and boosted trees.

    Modelled runs (if any) join every training fold and are never predicted.
    """
    meas = df[df["source"] == "measured"]
    extra = df[df["source"] != "measured"]
    pred = {"knn_clustered": np.zeros(len(meas)), "knn_unclustered": np.zeros(len(meas)),
            "boosted": np.zeros(len(meas))}
    for tr, te in splits:
        train_df = pd.concat([meas.iloc[tr], extra])
        test_df = meas.iloc[te]
        m_all, _ = fit_knn(train_df, adv.inputs)
        pred["knn_unclustered"][te] = m_all.predict(test_df[adv.inputs].values)
        for c in range(adv.k):
            part = train_df[train_df["cluster"] == c]
            rows = (test_df["cluster"] == c).values
            if not rows.any():
                continue
            # As Advisor.predict does: the cluster's model only where its runs span the
            # workload, the unclustered one elsewhere.
            rng = feature_ranges(part) if len(part) >= 2 else None
            cov = np.array([rng is not None and covers(rng, r)
                            for r in test_df[rows][FEATURES].to_dict("records")])
            idx = te[rows]
            if cov.any():
                m, _ = fit_knn(part, adv.inputs)
                pred["knn_clustered"][idx[cov]] = m.predict(
                    test_df[rows][cov][adv.inputs].values)
            if (~cov).any():
                pred["knn_clustered"][idx[~cov]] = pred["knn_unclustered"][idx[~cov]]
        pred["boosted"][te] = fit_boosted(train_df, adv.inputs).predict(
            test_df[adv.inputs].values)
    return meas, pred


def cv_scores(df, adv):
    """R² of per-cluster KNN, unclustered KNN and boosted trees, two ways: leave whole
    workloads out (what advice for a new workload faces), and Bang's random split of runs
    (5-fold), per cluster and overall."""
    meas = df[df["source"] == "measured"]
    groups = meas["workload"].values
    # Up to 10 workloads: leave one out at a time, as ``validate`` does.
    by_workload = list(GroupKFold(n_splits=min(10, len(set(groups)))).split(meas, groups=groups))
    by_run = list(KFold(n_splits=5, shuffle=True, random_state=SEED).split(meas))
    meas, pred = _cv_predictions(df, adv, by_workload)
    _, pred_r = _cv_predictions(df, adv, by_run)
    y = meas["log_tput"].values
    out = {name: float(r2_score(y, p)) for name, p in pred.items()}
    out["random_split"] = {name: float(r2_score(y, p)) for name, p in pred_r.items()}
    out["predictions"] = pd.DataFrame({"workload": meas["workload"].values, "measured": y,
                                       **pred})
    # What advice needs is the order of settings within a workload: score that too.
    out["regret"], out["within_workload_r2"] = {}, {}
    for name, p in pred.items():
        regrets, r2s = [], []
        for w in np.unique(groups):
            rows = groups == w
            yw, pw = y[rows], p[rows]
            regrets.append(1 - 10 ** (yw[int(np.argmax(pw))] - yw.max()))
            if rows.sum() > 1 and np.ptp(yw) > 0:
                r2s.append(r2_score(yw, pw))
        out["regret"][name] = float(np.mean(regrets))
        out["within_workload_r2"][name] = float(np.mean(r2s)) if r2s else float("nan")
    out["per_cluster"] = {}
    for c in range(adv.k):
        rows = (meas["cluster"] == c).values
        if rows.sum() >= 2:
            out["per_cluster"][c] = {
                "runs": int(rows.sum()),
                "workloads": int(meas[rows]["workload"].nunique()),
                "knn": float(r2_score(y[rows], pred["knn_clustered"][rows])),
                "boosted": float(r2_score(y[rows], pred["boosted"][rows])),
                "knn_random_split": float(r2_score(y[rows], pred_r["knn_clustered"][rows])),
                "boosted_random_split": float(r2_score(y[rows], pred_r["boosted"][rows])),
            }
    return out


# --- 6. recommendation ------------------------------------------------------------------------


def novelty(adv, features):
    """How far a workload lies from the corpus: out-of-range features, distance ratio."""
    W = adv.workloads
    out_of_range = [f for f in FEATURES
                    if features[f] < W[f].min() - 1e-9 or features[f] > W[f].max() + 1e-9]
    sc = StandardScaler().fit(W[FEATURES].values)
    Z = sc.transform(W[FEATURES].values)
    q = sc.transform(np.array([[features[f] for f in FEATURES]]))[0]
    d = np.sqrt(((Z - q) ** 2).sum(axis=1))
    nearest = W.index[int(d.argmin())]
    # Typical spacing of the corpus: each workload's distance to its nearest other workload.
    dd = np.sqrt(((Z[:, None, :] - Z[None, :, :]) ** 2).sum(axis=2))
    np.fill_diagonal(dd, np.inf)
    typical = float(np.median(dd.min(axis=1))) or 1.0
    return {"out_of_range": out_of_range, "nearest_workload": str(nearest),
            "distance": float(d.min()), "typical_distance": typical,
            "distance_ratio": float(d.min() / typical)}


def confidence(adv, nov):
    """high / medium / low from how new the workload is and how well the kept model predicts
    workloads it has not seen (leave-workload-out R²)."""
    r2 = adv.scores.get("boosted" if adv.model == "boosted" else "knn_clustered", 0.0)
    if nov["out_of_range"] or nov["distance_ratio"] > 3.0 or r2 < 0.2:
        return "low", r2
    if nov["distance_ratio"] <= 0.5 or (nov["distance_ratio"] <= 1.5 and r2 >= 0.5):
        return "high", r2
    return "medium", r2


def recommend(adv, features, current=None, top=5, candidates=None):
    """Predict every grid setting (or ``candidates``) for a workload; best first, with the
    gain over ``current``."""
    cur = grid.normalise(current or grid.DEFAULT)
    settings = list(candidates) if candidates else grid.full_grid()
    pred = adv.predict(features, settings)
    cur_pred = float(adv.predict(features, [cur])[0])
    order = np.argsort(-pred)
    recs = []
    for i in order[:top]:
        s = settings[i]
        recs.append({"settings": s, "predicted_bytes_per_s": float(10 ** pred[i]),
                     "predicted_gain": float(10 ** (pred[i] - cur_pred) - 1.0),
                     "drivers": drivers(adv, features, cur, s)})
    cluster = adv.cluster(features)
    nov = novelty(adv, features)
    level, r2 = confidence(adv, nov)
    return {
        "cluster": cluster,
        "cluster_features": {f: features[f] for f in adv.cluster_features},
        "cluster_workloads": sorted(w for w, c in adv.cluster_of.items() if c == cluster),
        "model": adv.model,
        "current": {"settings": cur, "predicted_bytes_per_s": float(10 ** cur_pred)},
        "recommendations": recs,
        "confidence": level,
        "model_r2": r2,
        "novelty": nov,
    }


def drivers(adv, features, current, best):
    """Each changed parameter's own predicted effect: switch it alone from current to best."""
    out = []
    for k in grid.SETTINGS:
        if current[k] == best[k]:
            continue
        one = dict(current)
        one[k] = best[k]
        p = adv.predict(features, [current, grid.normalise(one)])
        out.append({"parameter": k, "from": current[k], "to": best[k],
                    "predicted_gain": float(10 ** (p[1] - p[0]) - 1.0)})
    out.sort(key=lambda d: -abs(d["predicted_gain"]))
    return out


# --- 7. held-out validation -------------------------------------------------------------------


def validate(records, modelled=(), ks=(2, 3, 4, 5, 6), model=None):
    """Leave each workload out in turn, train on the rest, advise it, and score the advice.

    Candidate settings are the held-out workload's measured ones, so the regret (1 - measured
    throughput of the advice / best measured) is measured, never predicted. Both models are
    scored; ``model`` names the one whose advice counts (default: the one that the whole
    corpus's leave-workload-out R² keeps).
    """
    measured = [r for r in records if r.get("source", "measured") == "measured"]
    if model is None:
        model = train(measured + list(modelled), ks=ks,
                      include_modelled=bool(modelled)).model
    wls = sorted({r["workload"] for r in measured})
    rows = []
    for w in wls:
        train_recs = [r for r in measured if r["workload"] != w] + list(modelled)
        test = [r for r in measured if r["workload"] == w]
        adv = train(train_recs, ks=ks, score=False, include_modelled=bool(modelled))
        feats = test[0]["features"]
        y = np.array([math.log10(r["throughput"]) for r in test])
        res = {"workload": w, "runs": len(test), "cluster": adv.cluster(feats),
               "model": model}
        chosen = {}
        for m in ("knn", "boosted"):
            p = adv.predict(feats, [r["settings"] for r in test], model=m)
            chosen[m] = int(np.argmax(p))
            res[f"r2_{m}"] = float(r2_score(y, p)) if len(test) > 1 else float("nan")
            res[f"regret_{m}"] = float(1 - 10 ** (y[chosen[m]] - y.max()))
        res["regret"] = res[f"regret_{model}"]
        res["best_bytes_per_s"] = float(10 ** y.max())
        res["advice_bytes_per_s"] = float(10 ** y[chosen[model]])
        res["advice_settings"] = test[chosen[model]]["settings"]
        dflt = [i for i, r in enumerate(test)
                if grid.setting_key(r["settings"]) == grid.setting_key(grid.DEFAULT)]
        if dflt:
            res["default_bytes_per_s"] = float(10 ** y[dflt[0]])
            res["beats_default"] = bool(y[chosen[model]] > y[dflt[0]])
            res["better_than_default_exists"] = bool(y.max() > y[dflt[0]])
        rows.append(res)
    return rows


# --- modelled runs, one multi-node profile at a time -------------------------------------------


def train_modelled(records, profile, ks=(2, 3, 4, 5, 6)):
    """An advisor learned from one profile's modelled runs alone, never mixed with measured
    ones (their throughputs come from different machines and a model, not a clock)."""
    from . import modelled

    recs = [r for r in records if r.get("source") == "modelled"
            and modelled.profile_of(r) == profile]
    if not recs:
        raise AdviceError(f"no modelled runs for profile {profile!r}; generate them with "
                          f"`numaio advise collect-modelled --profiles {profile} --out FILE`")
    try:
        return train(recs, ks=ks, include_modelled=True)
    except AdviceError as e:
        raise AdviceError(f"{modelled.label(profile)}: {e}")
