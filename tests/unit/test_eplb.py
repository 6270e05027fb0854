"""EPLB: structure, agreement with a plain-Python greedy reference, hand cases, I/O errors."""

import json

import numpy as np
import pytest

from moesim.balance.eplb import load_from_csv, naive_gpu_load, rebalance_experts, zipf_load
from moesim.cli.eplb import app, eplb_command
from moesim.errors import ConfigError, MoesimError


def _reference_global(w, slots, gpus):
    """Plain-Python greedy (EPLB method, written from its description): replicate the expert
    with the largest load/count, then put items in decreasing load on the lightest GPU with
    room. Returns sorted per-GPU loads."""
    e = len(w)
    cnt = [1] * e
    for _ in range(slots - e):
        j = max(range(e), key=lambda i: w[i] / cnt[i])
        cnt[j] += 1
    items = sorted((w[i] / cnt[i] for i in range(e) for _ in range(cnt[i])), reverse=True)
    k = slots // gpus
    loads, fill = [0.0] * gpus, [0] * gpus
    for x in items:
        g = min((g for g in range(gpus) if fill[g] < k), key=lambda g: (loads[g], g))
        loads[g] += x
        fill[g] += 1
    return sorted(loads)


@pytest.mark.parametrize("experts,slots,gpus", [(16, 16, 4), (16, 24, 8), (32, 48, 6), (12, 36, 4)])
def test_matches_plain_python_greedy(experts, slots, gpus):
    rng = np.random.default_rng(experts + slots + gpus)
    w = rng.lognormal(0.0, 1.0, size=(5, experts))
    res = rebalance_experts(w, slots, 1, 1, gpus)
    for layer in range(5):
        ref = _reference_global(list(w[layer]), slots, gpus)
        if res.naive_kept[layer]:
            assert res.gpu_load[layer].max() <= max(ref)
        else:
            np.testing.assert_allclose(np.sort(res.gpu_load[layer]), ref, rtol=1e-12)


def test_structure_deepseek_decode_shape():
    w = zipf_load(256, 1.0, layers=4, seed=1)
    res = rebalance_experts(w, 288, 8, 18, 144)  # 8 % 18 != 0 -> global
    assert res.policy == "global"
    assert res.phy2log.shape == res.slot_gpu.shape == (4, 288)
    assert res.replica_count.shape == (4, 256) and res.gpu_load.shape == (4, 144)
    assert np.all(res.replica_count >= 1) and np.all(res.replica_count.sum(1) == 288)
    for layer in range(4):
        assert np.all(np.bincount(res.slot_gpu[layer], minlength=144) == 2)
        assert np.array_equal(np.bincount(res.phy2log[layer], minlength=256), res.replica_count[layer])
    np.testing.assert_allclose(res.gpu_load.sum(1), w.sum(1))
    assert np.all(res.imbalance_after <= res.imbalance_before)
    assert res.imbalance_after_mean < res.imbalance_before_mean / 5
    assert res.gpu_experts(0).shape == (144, 2)
    np.testing.assert_allclose(res.gpu_share().sum(1), 1.0)
    with pytest.raises(ValueError):
        res.phy2log[0, 0] = 3  # frozen arrays


def test_hierarchical_keeps_groups_and_replicas_node_local():
    experts, groups, nodes, gpus, slots = 64, 8, 4, 16, 80
    w = zipf_load(experts, 1.2, layers=3, seed=3)
    res = rebalance_experts(w, slots, groups, nodes, gpus)
    assert res.policy == "hierarchical"
    slot_node = res.slot_gpu // (gpus // nodes)
    group_size = experts // groups
    for layer in range(3):
        node_of_expert = {}
        for s in range(slots):
            e = int(res.phy2log[layer, s])
            node_of_expert.setdefault(e, set()).add(int(slot_node[layer, s]))
        assert all(len(v) == 1 for v in node_of_expert.values())  # replicas stay in one node
        for g in range(groups):  # a group's experts all sit on one node
            nodes_g = {next(iter(node_of_expert[e])) for e in range(g * group_size, (g + 1) * group_size)}
            assert len(nodes_g) == 1
        per_node = np.bincount(slot_node[layer], minlength=nodes)
        assert np.all(per_node == slots // nodes)
    np.testing.assert_allclose(res.gpu_load.sum(1), w.sum(1))
    assert np.all(res.gpu_load.max(1) <= naive_gpu_load(w, gpus).max(1) * (1 + 1e-12))


def test_lpt_counterexample_keeps_naive():
    # greedy packing gives {3,2,2}=7 | {3,2,0}=5; contiguous gives {3,3,0}=6 | {2,2,2}=6
    res = rebalance_experts([[3.0, 3.0, 0.0, 2.0, 2.0, 2.0]], 6, 1, 1, 2)
    assert res.naive_kept[0]
    np.testing.assert_allclose(res.gpu_load[0], [6.0, 6.0])
    assert res.imbalance_after[0] == pytest.approx(1.0)


def test_imbalance_before_by_hand():
    w = np.array([[8.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]])  # GPUs: 8 | 2 | 1 | 0
    res = rebalance_experts(w, 8, 1, 1, 4)
    assert res.imbalance_before[0] == pytest.approx(8.0 / (12.0 / 4))
    # uneven naive layout: 5 experts on 3 GPUs -> floor(e*3/5) = 0,0,1,1,2
    np.testing.assert_allclose(naive_gpu_load([[1, 2, 3, 4, 5.0]], 3), [[3.0, 7.0, 5.0]])


def test_replication_splits_hot_expert():
    w = np.array([[10.0, 1.0, 1.0, 1.0]])
    res = rebalance_experts(w, 8, 1, 1, 4)
    assert res.replica_count[0, 0] == 5  # 10/5 = 2 > 1: every spare slot to the hot expert
    # items 2,2,2,2,2,1,1,1 on 4 GPUs x 2 slots: {2,2} {2,1} {2,1} {2,1} -> max 4, mean 3.25
    np.testing.assert_allclose(np.sort(res.gpu_load[0]), [3.0, 3.0, 3.0, 4.0])
    assert res.imbalance_after[0] == pytest.approx(4.0 / 3.25)


def test_zero_load_and_one_slot_per_gpu():
    res = rebalance_experts(np.zeros((2, 8)), 8, 1, 1, 8)
    assert np.all(res.imbalance_after == 1.0) and np.all(res.imbalance_before == 1.0)
    res = rebalance_experts(zipf_load(4, 1.0, seed=0), 8, 1, 1, 8)  # experts < gpus
    assert res.gpu_load[0].max() <= naive_gpu_load(zipf_load(4, 1.0, seed=0), 8).max() + 1e-15


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(num_slots=250, num_gpus=125), "num_slots"),
        (dict(num_slots=290, num_gpus=144), "num_slots"),
        (dict(num_slots=288, num_gpus=144, num_nodes=7), "num_gpus"),
        (dict(num_slots=288, num_gpus=144, num_groups=3), "num_groups"),
        (dict(num_slots=288, num_gpus=0), "num_gpus"),
    ],
)
def test_validation_errors(kw, field):
    with pytest.raises(ConfigError, match=field) as ei:
        rebalance_experts(np.ones((1, 256)), **kw)
    assert "\n" not in str(ei.value)


def test_weight_errors():
    for bad in (np.array([[1.0, -1.0]]), np.array([[1.0, np.nan]]), np.zeros((0, 4))):
        with pytest.raises(ConfigError, match="weight"):
            rebalance_experts(bad, 2, 1, 1, 1)


def test_zipf_load():
    w = zipf_load(8, 1.0, layers=3, seed=7)
    assert w.shape == (3, 8)
    np.testing.assert_allclose(w.sum(1), 1.0)
    ref = 1.0 / np.arange(1, 9)
    np.testing.assert_allclose(np.sort(w[0])[::-1], ref / ref.sum())
    assert not np.array_equal(w[0], w[1])
    assert np.array_equal(w, zipf_load(8, 1.0, layers=3, seed=7))
    np.testing.assert_allclose(zipf_load(5, 0.0), 0.2)
    with pytest.raises(ConfigError, match="zipf"):
        zipf_load(8, -1.0)


def test_load_from_csv(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("e0,e1,e2\n1,2,3\n# comment\n\n4,5,6\n")
    np.testing.assert_allclose(load_from_csv(good), [[1, 2, 3], [4, 5, 6]])
    cases = {
        "empty": ("", "empty"),
        "ragged": ("1,2,3\n4,5\n", "columns"),
        "neg": ("1,-2\n", "negative"),
        "nan": ("1,nan\n", "NaN"),
        "text": ("1,2\n3,x\n", "non-numeric"),
    }
    for name, (text, msg) in cases.items():
        p = tmp_path / f"{name}.csv"
        p.write_text(text)
        with pytest.raises(ConfigError, match=msg) as ei:
            load_from_csv(p)
        assert "\n" not in str(ei.value) and str(ei.value).startswith("load:")
    with pytest.raises(ConfigError, match="does not exist"):
        load_from_csv(tmp_path / "missing.csv")


def test_cli_json_and_summary(tmp_path, capsys):
    lines = []
    out = eplb_command(experts=16, slots=24, gpus=8, zipf=1.0, layers=2, seed=0, json_out=True, echo=lines.append)
    d = json.loads(lines[0])
    assert len(lines) == 1 and d["imbalance_after"] <= d["imbalance_before"]
    assert len(d["placement"]) == 2 and len(d["placement"][0]) == 8 and len(d["placement"][0][0]) == 3
    assert len(d["gpu_load"][0]) == 8 and out["slots"] == 24
    csv = tmp_path / "load.csv"
    csv.write_text("\n".join(",".join(str(x) for x in row) for row in zipf_load(16, 1.0, 3, 1)))
    lines = []
    eplb_command(slots=32, gpus=4, load=csv, echo=lines.append)
    assert "before" in lines[1] and "after" in lines[1] and len(lines) == 4 + 4
    eplb_command(experts=16, slots=16, gpus=4, layers=1, echo=lines.append)
    assert "no --zipf/--load" in capsys.readouterr().err  # default zipf 1.0 is announced


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(experts=16, slots=12, gpus=4), "--slots"),
        (dict(experts=16, slots=24, gpus=5), "--slots"),
        (dict(experts=16, slots=24, gpus=8, nodes=3), "--gpus"),
        (dict(experts=16, slots=24, gpus=8, groups=3), "--groups"),
        (dict(experts=16, slots=24, gpus=8, zipf=1.0, load="x.csv"), "exactly one"),
        (dict(experts=16, slots=24, gpus=8, zipf=-1.0), "--zipf"),
    ],
)
def test_cli_validation(kw, msg):
    with pytest.raises(MoesimError, match=msg):
        eplb_command(echo=lambda s: None, **kw)


def test_typer_app_errors_one_line():
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["eplb", "--experts", "16", "--slots", "20", "--gpus", "8"])
    assert r.exit_code == 2
    assert "error: --slots" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["eplb", "--experts", "16", "--slots", "24", "--gpus", "8", "--layers", "1", "--json"])
    assert r.exit_code == 0
    assert "imbalance_before" in r.stdout
