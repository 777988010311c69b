"""Corpus-scale neighbourhoods (blocked exact search) and the pair-signal table: known answers
against brute force on the full matrix, a planted neighbourhood, Depth on a hand-derived geometry,
one notion of same meaning shared with the gate, and the pair cache. numpy only; fast."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from refusal_audit.studies.confusion import GateParams
from refusal_audit.studies.confusion import analysis as A
from refusal_audit.studies.confusion import clusters as CL
from refusal_audit.studies.confusion import metrics as M
from refusal_audit.studies.confusion import neighbours as N
from refusal_audit.studies.confusion import pairs as P


def circle(degrees):
    rad = np.deg2rad(degrees)
    return np.stack([np.cos(rad), np.sin(rad)], axis=1)


def test_a_planted_neighbourhood_is_found_at_corpus_scope():
    # 400 prompts in clusters of 4 on random directions of R^32; r = row 0 points along e0. Five accepted
    # prompts of OTHER clusters are planted at known angles to e0 (in the e0-e1 plane), one rejected
    # prompt closer still; the rest are orthogonal to e0 and e1 (sim 0 to r).
    rng = np.random.default_rng(0)
    n, d = 400, 32
    e = np.zeros((n, d))
    e[:, 2:] = rng.normal(size=(n, d - 2))
    clusters = np.repeat(np.arange(n // 4), 4)
    accepted = rng.random(n) < 0.6
    e[0] = np.eye(d)[0]
    accepted[0] = False
    planted = {101: 5.0, 202: 12.0, 57: 20.0, 390: 31.0, 250: 44.0}  # row -> angle to r (degrees)
    for row, angle in planted.items():
        e[row] = 0
        e[row, :2] = circle([angle])[0]
        accepted[row] = True
    e[300], accepted[300] = 0, False
    e[300, :2] = circle([2.0])[0]  # nearer, but rejected: not in N_k
    labels = np.full(n, "safe", dtype=object)
    nb = N.neighbourhoods(N.Similarity(embeddings=e), accepted, clusters, k=5, depth_k=3, theta=0.95,
                          scope="corpus", labels=labels, block=37)[0]
    assert nb.nearest_accepted.tolist() == [101, 202, 57, 390, 250]
    # same meaning: its own cluster's accepted members (rows 1-3) or cos > .95 (5 and 12 degrees only)
    own = [j for j in (1, 2, 3) if accepted[j]]
    assert nb.n_events == len(own) + 2 and set(nb.events) == set(own) | {101, 202}
    assert nb.depth_neighbours.tolist() == [300, 101, 202]
    assert nb.nearest_accepted_sim == pytest.approx(np.cos(np.deg2rad(5)))
    assert nb.nearest_rejected_sim == pytest.approx(np.cos(np.deg2rad(2)))
    in_cluster = N.neighbourhoods(N.Similarity(embeddings=e), accepted, clusters, k=5, depth_k=3, theta=0.95,
                                  scope="cluster", labels=labels)[0]
    assert set(in_cluster.nearest_accepted) == set(own) and in_cluster.n_events == len(own)
    # the planted neighbours carry the other label: the rule takes all five out of N_k and both events
    other = labels.copy()
    other[list(planted)] = "unsafe"
    ruled = N.neighbourhoods(N.Similarity(embeddings=e), accepted, clusters, k=5, depth_k=3, theta=0.95,
                             scope="corpus", labels=other)[0]
    assert not set(ruled.nearest_accepted) & set(planted) and ruled.n_events == len(own)
    assert (ruled.neighbours_removed, ruled.events_removed) == (5, 2)


@pytest.mark.parametrize("scope", M.SCOPES)
def test_blocked_search_equals_brute_force_on_the_full_matrix(scope):
    rng = np.random.default_rng(1)
    e = rng.normal(size=(150, 8)) + rng.normal(size=(30, 8)).repeat(5, axis=0) * 2  # 30 clusters of 5
    clusters = np.repeat(np.arange(30), 5)
    accepted = rng.random(150) < 0.5
    u = e / np.linalg.norm(e, axis=1, keepdims=True)
    full = u @ u.T
    labels = np.where(np.arange(150) % 10 < 5, "safe", "unsafe").astype(object)  # clusters alternate safe / unsafe
    got = N.neighbourhoods(N.Similarity(embeddings=e), accepted, clusters, k=4, depth_k=6, theta=0.8, scope=scope,
                           labels=labels, block=16)
    for r in np.flatnonzero(~accepted):
        others = [j for j in range(150) if j != r and (scope == "corpus" or clusters[j] == clusters[r])]
        ranked = sorted(others, key=lambda j: (-full[r, j], j))
        acc = [j for j in ranked if accepted[j] and (clusters[j] == clusters[r] or labels[j] == labels[r])]
        same = [j for j in acc if clusters[j] == clusters[r] or full[r, j] > 0.8]
        assert got[r].nearest_accepted.tolist() == acc[:4]
        assert got[r].events.tolist() == same[:4] and got[r].n_events == len(same)
        kin = [j for j in ranked if clusters[j] == clusters[r] or labels[j] == labels[r]]  # depth keeps the label rule
        assert got[r].depth_neighbours.tolist() == kin[:6]
    pairs = N.same_meaning_pairs(N.Similarity(embeddings=e), clusters, 0.8, scope, labels=labels, block=16)
    brute = [(i, j) for i in range(150) for j in range(i + 1, 150)
             if (clusters[i] == clusters[j]) or (scope == "corpus" and full[i, j] > 0.8 and labels[i] == labels[j])]
    assert [tuple(x) for x in pairs] == brute
    # the signal pass covers N_k(r) of every rejection whose k nearest accepted are among its `cover` nearest
    cover = 12
    signal = {tuple(x) for x in N.signal_pairs(N.Similarity(embeddings=e), clusters, 0.8, cover, labels, block=16)}
    assert set(brute) <= signal
    for r in np.flatnonzero(~accepted):
        cand = sorted([j for j in range(150) if j != r and (clusters[j] == clusters[r] or labels[j] == labels[r])],
                      key=lambda j: (-full[r, j], j))
        if sum(accepted[j] for j in cand[:cover]) >= 4:
            assert all((min(r, j), max(r, j)) in signal for j in got[r].nearest_accepted)


def test_depth_across_clusters_by_hand():
    # r (cluster a) at 0 deg; b1 accepted at 10, b2 rejected at 20 (cluster b); c1 accepted at 30,
    # c2 accepted at 100 (cluster c); a2 accepted at 60 (r's cluster)
    prompts = pd.DataFrame({"prompt_id": ["r", "b1", "b2", "c1", "c2", "a2"],
                            "cluster": ["a", "b", "b", "c", "c", "a"],
                            "accepted": [False, True, False, True, True, True], "label": "safe"})
    sim = N.Similarity(embeddings=circle([0, 10, 20, 30, 100, 60]))
    cos = lambda d: np.cos(np.deg2rad(d))  # noqa: E731
    depth = lambda **kw: M.score(prompts, sim, params=M.ConfusionParams(**kw))["depth"][0]  # noqa: E731
    assert depth(depth_k=3) == pytest.approx(2 / 3)  # b1, b2, c1
    assert depth(depth_k=2) == pytest.approx(1 / 2)
    assert depth(depth_k=5) == pytest.approx(4 / 5)
    assert depth(depth_method="margin") == pytest.approx(cos(10) - cos(20))
    assert depth(depth_k=3, scope="cluster") == 1.0  # a2 is its only neighbour in its cluster
    assert depth(depth_method="margin", scope="cluster") == pytest.approx(cos(60) + 1)
    # depth keeps the label rule: unlabelled, only r's own cluster may share its meaning (a2 alone)
    bare = lambda **kw: M.score(prompts.drop(columns=["label"]), sim, params=M.ConfusionParams(**kw))["depth"][0]  # noqa: E731
    assert bare(depth_k=3) == 1.0 and bare(depth_method="margin") == pytest.approx(cos(60) + 1)


def test_a_cluster_that_passed_the_gate_with_a_split_decision_is_confused():
    # seed at 0 deg, paraphrases at +40 and -40: each has cos .766 >= tau .70 to the seed, so both pass
    # the cosine gate, yet cos(p1, p2) = cos 80 = .17. p1 accepted, p2 rejected: the same meaning by
    # the gate's own standard, so a confusion event (a sim-only rule at any theta > .17 would miss it).
    rows = pd.DataFrame({"cluster_id": "k", "member": [0, 1, 2], "rule": ["seed", "user", "user"],
                         "prompt": ["a b c", "d e f", "g h i"], "label": "safe", "dataset": "hand",
                         "source_file": "", "source_row": 0, "source_type": "", "licence": "CC0"})
    e = circle([0, 40, -40])
    gates = GateParams(tau=0.70, delta=0.2, safety=False)
    gated = CL.apply_gates(rows, e, np.zeros(3), gates)
    assert gated["included"].all()
    items = pd.DataFrame({"item_id": ["s", "p1", "p2"], "cluster": "k", "member": [0, 1, 2], "rule": "user",
                          "label": "safe", "dataset": "hand", "included": True, "embedding": list(e)})
    decided = pd.DataFrame({"model": "m", "judge": "j", "item_id": ["p1", "p2"], "accepted": [True, False]})
    assert e[1] @ e[2] < gates.tau
    for scope in M.SCOPES:
        _, clusters = A.score_decisions(items, decided, {}, M.ConfusionParams(theta=gates.tau, scope=scope))
        assert clusters["confusion_rate"].iloc[0] > 0 and clusters["n_confused"].iloc[0] == 1


def fake_signals(rng, n):
    return [SimpleNamespace(hidden=rng.normal(size=(int(rng.integers(2, 6)), 8)),
                            next_token_logprobs=np.log(rng.dirichlet(np.ones(30))),
                            token_logprobs=-rng.exponential(size=3)) for _ in range(n)]


def test_pair_signals_are_computed_once_and_read_back_in_both_readings(tmp_path):
    rng = np.random.default_rng(2)
    sigs = fake_signals(rng, 6)
    keys = [P.prompt_key("m", -1, [i, i + 1], 0, 2) for i in range(6)]
    pairs = np.array([[0, 1], [1, 0], [2, 5], [3, 4]])  # (1, 0) is the same unordered pair as (0, 1)
    path = tmp_path / "pairs.parquet"
    table, new = P.compute(keys, sigs, pairs, "greedy_a_to_r", "jsd", path)
    assert new == 3 and len(table) == 3 and path.is_file()
    again, new = P.compute(keys, sigs, pairs[:2], "greedy_a_to_r", "jsd", path)
    assert new == 0 and len(again) == 1  # read from the table, not recomputed
    ids = {f"x{i}": k for i, k in enumerate(keys)}
    ppl = {f"x{i}": float(-np.mean(s.token_logprobs)) for i, s in enumerate(sigs)}
    cp = M.ConfusionParams(alignment="greedy_a_to_r", contrast_scale=2.0)
    got = P.lookup(P.read(path), ids, ppl, cp)
    assert len(got) == 6
    for a, r in [(0, 1), (1, 0), (5, 2), (2, 5), (3, 4)]:
        want = M.pair_signals(sigs[a], sigs[r], cp)
        assert got[(f"x{a}", f"x{r}")] == pytest.approx((want["drift"], want["shift"], want["contrast"]))
    assert ("x0", "x2") not in got  # not a same-meaning pair: never computed
    other, new = P.compute(keys, sigs, pairs, "greedy", "jsd", path)  # other settings: new rows, old kept
    assert new == 3 and len(P.read(path)) == 6
