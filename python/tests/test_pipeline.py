"""Each step of Bang's pipeline on corpora whose answer is known."""

import numpy as np
import pandas as pd
import pytest
from conftest import SHAPES, make_corpus, true_log_tput

from numaio_advisor import grid, pipeline
from numaio_advisor.errors import AdviceError
from numaio_advisor.features import bench_features


def test_rank_features_puts_the_strongest_first_and_skips_redundant_copies():
    rng = np.random.default_rng(0)
    n = 400
    a = rng.normal(size=n)
    df = pd.DataFrame({
        "strong": a,
        "copy": a + rng.normal(scale=0.01, size=n),   # redundant with `strong`
        "other": rng.normal(size=n),
        "constant": np.ones(n),
    })
    df["log_tput"] = 2 * df["strong"] + 0.8 * df["other"] + rng.normal(scale=0.1, size=n)
    ranked = pipeline.rank_features(df, ["strong", "copy", "other", "constant"], pool=1)
    assert ranked[0] == "strong"
    # Second pick comes from the features least correlated with the first: not its copy.
    assert ranked[1] == "other"
    assert "constant" not in ranked


def _blobs(centres, per=3, noise=0.05, extra_noise_feature=True, seed=0):
    rng = np.random.default_rng(seed)
    rows, names = [], []
    for i, c in enumerate(centres):
        for j in range(per):
            r = {"x": c[0] + rng.normal(scale=noise), "y": c[1] + rng.normal(scale=noise)}
            if extra_noise_feature:
                r["noise"] = rng.uniform(-3, 3)
            rows.append(r)
            names.append(f"w{i}-{j}")
    return pd.DataFrame(rows, index=names)


def test_cluster_score_prefers_the_true_grouping():
    W = _blobs([(0, 0), (5, 5), (0, 5)])
    good = pipeline.cluster_score(W[["x", "y"]].values, 3)
    bad = pipeline.cluster_score(W[["x", "y", "noise"]].values, 3)
    assert good["silhouette"] > 0.8 and good["dbi"] < 0.3
    assert good["combined"] > bad["combined"]


def test_backward_selection_drops_the_noise_feature():
    W = _blobs([(0, 0), (5, 5), (0, 5)])
    subset, score = pipeline.backward_selection(W, ["noise", "x", "y"], 3)
    assert sorted(subset) == ["x", "y"]
    assert score["silhouette"] > 0.8


def test_choose_k_finds_three_groups_and_respects_cluster_size():
    W = _blobs([(0, 0), (5, 5), (0, 5)], per=3, extra_noise_feature=False)
    best, tried = pipeline.choose_k(W, ["x", "y"], ks=(2, 3, 4), min_workloads=2)
    k, subset, score = best
    assert k == 3
    assert {t["k"] for t in tried} == {2, 3, 4}
    # With 3 workloads per group, asking for 3 per cluster still allows k = 3; asking for 4
    # rules out every k whose clusters would be smaller.
    best4, tried4 = pipeline.choose_k(W, ["x", "y"], ks=(2, 3, 4), min_workloads=4)
    assert best4 is None or best4[0] == 2
    assert all(not t["eligible"] for t in tried4 if t["k"] >= 3)


def test_fit_knn_cross_validates_k_and_predicts():
    rng = np.random.default_rng(3)
    n = 120
    df = pd.DataFrame({"a": rng.uniform(0, 10, n), "b": rng.uniform(0, 1000, n)})
    df["log_tput"] = np.sin(df["a"]) + df["b"] / 1000 + rng.normal(scale=0.05, size=n)
    df["workload"] = [f"w{i % 6}" for i in range(n)]
    model, k = pipeline.fit_knn(df, ["a", "b"], ks=(1, 3, 5, 9, 40))
    assert k in (1, 3, 5, 9)   # 40 neighbours would blur the sine; CV must not pick it
    pred = model.predict(df[["a", "b"]].values)
    assert np.corrcoef(pred, df["log_tput"])[0, 1] > 0.9
    # Standardisation: `b` (range 1000) must not drown `a` (range 10).
    assert model.steps[0][0] == "standardscaler"


def test_boosted_baseline_fits(synthetic):
    df = pipeline.to_frame(synthetic)
    inputs = pipeline.setting_columns() + pipeline.FEATURES
    m = pipeline.fit_boosted(df, inputs)
    from sklearn.metrics import r2_score

    assert r2_score(df["log_tput"], m.predict(df[inputs].values)) > 0.9


def test_train_reports_r2_per_cluster_and_both_models(trained):
    adv = trained
    assert 2 <= adv.k <= 4
    for name in ("knn_clustered", "knn_unclustered", "boosted"):
        assert -1.0 < adv.scores[name] <= 1.0
    assert set(adv.scores["per_cluster"]) == set(range(adv.k))
    # The model kept is the one whose advice loses less on held-out workloads.
    reg = adv.scores["regret"]
    assert set(reg) == {"knn_clustered", "knn_unclustered", "boosted"}
    if abs(reg["knn_clustered"] - reg["boosted"]) > 0.01:
        assert adv.model == ("knn" if reg["knn_clustered"] < reg["boosted"] else "boosted")
    # Every workload has a cluster, and every cluster enough workloads to train on.
    assert set(adv.cluster_of) == set(SHAPES)
    sizes = [list(adv.cluster_of.values()).count(c) for c in range(adv.k)]
    assert min(sizes) >= 2
    # The clustering features come from the correlation ranking.
    assert set(adv.cluster_features) <= set(adv.ranking)


def test_recommend_finds_the_known_best_setting(trained):
    f = bench_features("randread", 4096, 48 << 20)
    res = pipeline.recommend(trained, f, current=grid.DEFAULT, top=3)
    best = res["recommendations"][0]
    assert best["settings"]["io"] == "kernel"
    assert best["settings"]["threads"] == 4
    assert best["predicted_gain"] > 0.3
    assert res["confidence"] in ("high", "medium")
    names = {d["parameter"] for d in best["drivers"]}
    assert {"io", "threads"} <= names
    fw = bench_features("seqwrite", 1 << 20, 48 << 20)
    bw = pipeline.recommend(trained, fw, top=1)["recommendations"][0]["settings"]
    assert bw["io"] == "direct" and bw["block_size"] == 65536


def test_out_of_range_workload_gets_low_confidence(trained):
    f = bench_features("randread", 4096, 64 << 30)   # 64 GiB: far beyond the corpus
    res = pipeline.recommend(trained, f)
    assert res["confidence"] == "low"
    assert "data_log2" in res["novelty"]["out_of_range"]
    assert res["novelty"]["distance_ratio"] > 3


def test_validate_holds_out_whole_workloads_and_beats_the_default(synthetic):
    rows = pipeline.validate(synthetic, ks=(2, 3))
    assert [r["workload"] for r in rows] == sorted(SHAPES)
    # Settings act additively here: trees generalise to unseen workloads, KNN does not, and
    # the model kept must be the one that predicts better.
    assert {r["model"] for r in rows} == {"boosted"}
    regrets = sorted(r["regret"] for r in rows)
    assert all(0.0 <= x <= 1.0 for x in regrets)
    assert regrets[len(regrets) // 2] < 0.1, rows
    for r in rows:
        assert r["runs"] == 24
        assert r["r2_boosted"] > r["r2_knn"] - 0.5
    wins = [r["beats_default"] for r in rows if r["better_than_default_exists"]]
    assert sum(wins) >= len(wins) - 1, rows


def test_regret_is_measured_not_predicted():
    recs = make_corpus(per=12, noise=0.0)
    rows = pipeline.validate(recs, ks=(2, 3), model="knn")
    for r in rows:
        f = bench_features(*SHAPES[r["workload"]])
        best = max(10 ** true_log_tput(f, x["settings"]) for x in recs
                   if x["workload"] == r["workload"])
        assert r["best_bytes_per_s"] == pytest.approx(best)
        assert r["regret"] == pytest.approx(1 - r["advice_bytes_per_s"] / best)


def test_empty_and_tiny_corpora_are_refused():
    with pytest.raises(AdviceError, match="empty"):
        pipeline.train([])
    tiny = [r for r in make_corpus(per=4) if r["workload"] in ("rr4k", "rw4k")]
    with pytest.raises(AdviceError, match="at least 4"):
        pipeline.train(tiny)


def test_modelled_runs_train_but_never_validate(synthetic):
    modelled = []
    for r in make_corpus(per=6, seed=9):
        m = dict(r, source="modelled", workload="model-" + r["workload"])
        modelled.append(m)
    rows = pipeline.validate(synthetic, modelled=modelled, ks=(2, 3), model="knn")
    assert all(not r["workload"].startswith("model-") for r in rows)
