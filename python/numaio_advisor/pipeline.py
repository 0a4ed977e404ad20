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
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

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
    km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(Xs)
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


def fit_knn(df, inputs, ks=(1, 2, 3, 5, 7, 9, 13)):
    """KNN regression of log throughput on standardised inputs, k cross-validated."""
    X, y = df[inputs].values, df["log_tput"].values
    ks = [k for k in ks if k <= max(1, int(len(df) * 0.5))] or [1]
    cv, groups = _cv(df["workload"].values, len(df))
    pipe = make_pipeline(StandardScaler(), KNeighborsRegressor(weights="distance"))
    search = GridSearchCV(pipe, {"kneighborsregressor__n_neighbors": ks}, cv=cv, scoring="r2")
    search.fit(X, y, groups=groups)
    return search.best_estimator_, int(search.best_params_["kneighborsregressor__n_neighbors"])


def fit_boosted(df, inputs):
    """HistGradientBoosting on every run."""
    m = HistGradientBoostingRegressor(max_iter=300, learning_rate=0.08, random_state=SEED)
    return m.fit(df[inputs].values, df["log_tput"].values)


# --- the advisor ------------------------------------------------------------------------------


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
        return self.knn[self.cluster(features)].predict(X)


def train(records, ks=(2, 3, 4, 5, 6)):
    """Every step on a corpus; the model kept is the one with the better cross-validated R²."""
    df = to_frame(records)
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
    boosted = fit_boosted(df, inputs)
    adv = Advisor(k=k, cluster_features=subset, ranking=ranking, scaler=scaler, kmeans=kmeans,
                  knn=knn, knn_k=knn_k, boosted=boosted, inputs=inputs, model="knn",
                  workloads=W, cluster_of=cluster_of, k_search=tried)
    scores = cv_scores(df, adv)
    adv.scores = scores
    adv.model = "boosted" if scores["boosted"] > scores["knn_clustered"] else "knn"
    return adv


def cv_scores(df, adv):
    """Leave-workload-out R² of per-cluster KNN, unclustered KNN and boosted trees."""
    meas = df[df["source"] == "measured"]
    groups = meas["workload"].values
    gkf = GroupKFold(n_splits=min(5, len(set(groups))))
    pred = {"knn_clustered": np.zeros(len(meas)), "knn_unclustered": np.zeros(len(meas)),
            "boosted": np.zeros(len(meas))}
    for tr, te in gkf.split(meas, groups=groups):
        train_df = pd.concat([meas.iloc[tr], df[df["source"] != "measured"]])
        test_df = meas.iloc[te]
        for c in range(adv.k):
            part = train_df[train_df["cluster"] == c]
            rows = (test_df["cluster"] == c).values
            if rows.any() and len(part) >= 2:
                m, _ = fit_knn(part, adv.inputs)
                pred["knn_clustered"][te[rows]] = m.predict(test_df[rows][adv.inputs].values)
            elif rows.any():
                pred["knn_clustered"][te[rows]] = train_df["log_tput"].mean()
        m, _ = fit_knn(train_df, adv.inputs)
        pred["knn_unclustered"][te] = m.predict(test_df[adv.inputs].values)
        pred["boosted"][te] = fit_boosted(train_df, adv.inputs).predict(
            test_df[adv.inputs].values)
    y = meas["log_tput"].values
    out = {name: float(r2_score(y, p)) for name, p in pred.items()}
    out["predictions"] = pd.DataFrame({"workload": meas["workload"].values, "measured": y,
                                       **pred})
    out["per_cluster"] = {}
    for c in range(adv.k):
        rows = (meas["cluster"] == c).values
        if rows.sum() >= 2:
            out["per_cluster"][c] = {
                "runs": int(rows.sum()),
                "workloads": int(meas[rows]["workload"].nunique()),
                "knn": float(r2_score(y[rows], pred["knn_clustered"][rows])),
                "boosted": float(r2_score(y[rows], pred["boosted"][rows])),
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


def confidence(adv, nov, cluster):
    r2 = adv.scores.get("per_cluster", {}).get(cluster, {}).get(
        "boosted" if adv.model == "boosted" else "knn", adv.scores.get(adv.model, 0.0))
    if nov["out_of_range"] or nov["distance_ratio"] > 3.0 or r2 < 0.2:
        return "low", r2
    if nov["distance_ratio"] <= 1.5 and r2 >= 0.5:
        return "high", r2
    return "medium", r2


def recommend(adv, features, current=None, top=5):
    """Predict every grid setting for a workload; best first, with the gain over ``current``."""
    cur = grid.normalise(current or grid.DEFAULT)
    settings = grid.full_grid()
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
    level, r2 = confidence(adv, nov, cluster)
    return {
        "cluster": cluster,
        "cluster_features": {f: features[f] for f in adv.cluster_features},
        "cluster_workloads": sorted(w for w, c in adv.cluster_of.items() if c == cluster),
        "model": adv.model,
        "current": {"settings": cur, "predicted_bytes_per_s": float(10 ** cur_pred)},
        "recommendations": recs,
        "confidence": level,
        "cluster_r2": r2,
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


def validate(records, modelled=(), ks=(2, 3, 4, 5, 6)):
    """Leave each workload out in turn, train on the rest, advise it, and score the advice.

    Candidate settings are the held-out workload's measured ones, so the regret (1 - measured
    throughput of the advice / best measured) is measured, never predicted.
    """
    measured = [r for r in records if r.get("source", "measured") == "measured"]
    wls = sorted({r["workload"] for r in measured})
    rows = []
    for w in wls:
        train_recs = [r for r in measured if r["workload"] != w] + list(modelled)
        test = [r for r in measured if r["workload"] == w]
        adv = train(train_recs, ks=ks)
        feats = test[0]["features"]
        y = np.array([math.log10(r["throughput"]) for r in test])
        res = {"workload": w, "runs": len(test), "cluster": adv.cluster(feats)}
        for model in ("knn", "boosted"):
            p = adv.predict(feats, [r["settings"] for r in test], model=model)
            best = int(np.argmax(p))
            res[f"r2_{model}"] = float(r2_score(y, p)) if len(test) > 1 else float("nan")
            res[f"regret_{model}"] = float(1 - 10 ** (y[best] - y.max()))
        res["model"] = adv.model
        res["regret"] = res[f"regret_{adv.model}"]
        dflt = [i for i, r in enumerate(test)
                if grid.setting_key(r["settings"]) == grid.setting_key(grid.DEFAULT)]
        chosen = int(np.argmax(adv.predict(feats, [r["settings"] for r in test])))
        res["best_bytes_per_s"] = float(10 ** y.max())
        res["advice_bytes_per_s"] = float(10 ** y[chosen])
        if dflt:
            res["default_bytes_per_s"] = float(10 ** y[dflt[0]])
            res["beats_default"] = bool(y[chosen] > y[dflt[0]])
            res["better_than_default_exists"] = bool(y.max() > y[dflt[0]])
        rows.append(res)
    return rows
