"""Expert-parallel load balancer (EPLB): replicate hot experts into redundant slots and pack
the physical experts onto GPUs so that the slowest GPU carries as little load as possible.

Method (source: github.com/deepseek-ai/EPLB, eplb.py; DeepSeek-V3 tech report §3.4 and the
"DeepSeek-V3/R1 inference system overview", seed 000 / 003 load-balancer section):

* hierarchical policy, used when ``num_groups % num_nodes == 0`` (prefill, node-limited
  routing): (1) pack expert groups onto nodes, each node taking ``num_groups/num_nodes``
  groups, balancing the per-node load; (2) inside each node, replicate its hottest experts
  into the node's share of redundant slots; (3) pack the node's physical experts onto its
  GPUs, each GPU taking exactly ``num_slots/num_gpus`` slots.
* global policy otherwise (decode): the same with one group and one node.
* replication is greedy: each redundant slot goes to the expert whose per-replica load
  ``load/replica_count`` is currently the largest (this minimises the max replica load).
* packing is greedy longest-processing-time with a cardinality cap: items in decreasing
  load go to the lightest GPU that still has a free slot.

Everything is numpy, vectorised over layers (and nodes); the only Python loops run over
redundant slots (replication) and over items beyond the first round (packing), each step
touching a [layers, packs] array.

Safeguard (moesim's addition, not in EPLB): greedy packing is a heuristic and can, on
adversarial loads, end with a higher max than the naive contiguous placement (e.g. loads
[3, 3, 0, 2, 2, 2] on 2 GPUs: greedy 7, contiguous 6). For such layers the naive placement
is kept, its spare slots filled with co-located replicas (which leaves every GPU's load
unchanged), so the result is never worse than naive. ``naive_kept`` flags those layers.

Units: loads are whatever the caller measures (tokens routed per expert, or shares); the
functions only use ratios.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.balance.load_csv import load_from_csv  # re-exported: the reader moved to its own module
from moesim.errors import ConfigError

__all__ = [
    "EplbResult",
    "rebalance_experts",
    "naive_gpu_load",
    "zipf_load",
    "load_from_csv",
]


@dataclass(frozen=True)
class EplbResult:
    """Placement of physical expert slots on GPUs, per MoE layer.

    phy2log[l, s]       logical expert held by physical slot s (slots are GPU-major:
                        slot s lives on GPU s // slots_per_gpu)
    slot_gpu[l, s]      GPU of slot s
    replica_count[l, e] physical replicas of logical expert e (>= 1, sums to num_slots)
    gpu_load[l, g]      load on GPU g, each replica taking load/replica_count
    imbalance_before[l] max/mean per-GPU load, naive contiguous placement, no replicas
    imbalance_after[l]  max/mean per-GPU load of this placement
    naive_kept[l]       True where greedy packing lost to naive and naive was kept
    policy              "hierarchical" or "global"
    """

    phy2log: np.ndarray
    slot_gpu: np.ndarray
    replica_count: np.ndarray
    gpu_load: np.ndarray
    imbalance_before: np.ndarray
    imbalance_after: np.ndarray
    naive_kept: np.ndarray
    policy: str

    @property
    def num_layers(self) -> int:
        return int(self.phy2log.shape[0])

    @property
    def num_slots(self) -> int:
        return int(self.phy2log.shape[1])

    @property
    def num_gpus(self) -> int:
        return int(self.gpu_load.shape[1])

    @property
    def slots_per_gpu(self) -> int:
        return self.num_slots // self.num_gpus

    @property
    def imbalance_before_mean(self) -> float:
        return float(np.mean(self.imbalance_before))

    @property
    def imbalance_after_mean(self) -> float:
        return float(np.mean(self.imbalance_after))

    def gpu_experts(self, layer: int = 0) -> np.ndarray:
        """[gpus, slots_per_gpu] logical expert ids held by each GPU in one layer."""
        return self.phy2log[layer].reshape(self.num_gpus, self.slots_per_gpu)

    def gpu_share(self) -> np.ndarray:
        """[layers, gpus] each GPU's share of the layer's routed load (rows sum to 1)."""
        total = self.gpu_load.sum(axis=1, keepdims=True)
        uniform = np.full_like(self.gpu_load, 1.0 / self.num_gpus)
        return np.where(total > 0, self.gpu_load / np.where(total > 0, total, 1.0), uniform)


# ----------------------------------------------------------------------------- helpers


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _inverse(perm: np.ndarray) -> np.ndarray:
    """Row-wise inverse of a permutation array [rows, n]."""
    rows, n = perm.shape
    inv = np.empty_like(perm)
    inv[np.arange(rows)[:, None], perm] = np.arange(n)
    return inv


def _replicate(weight: np.ndarray, num_phy: int):
    """Greedy replication (EPLB `replicate_experts`): each extra slot goes to the expert with
    the largest load/replica_count. weight [D, n] -> phy2log [D, num_phy], rank [D, num_phy],
    count [D, n]. Loop over redundant slots, vectorised over rows."""
    d, n = weight.shape
    ar = np.arange(d)
    phy2log = np.empty((d, num_phy), dtype=np.int64)
    phy2log[:, :n] = np.arange(n)
    rank = np.zeros((d, num_phy), dtype=np.int64)
    count = np.ones((d, n), dtype=np.int64)
    per_replica = weight.astype(np.float64, copy=True)
    for i in range(n, num_phy):
        idx = np.argmax(per_replica, axis=1)
        c = count[ar, idx]
        phy2log[:, i] = idx
        rank[:, i] = c
        count[ar, idx] = c + 1
        per_replica[ar, idx] = weight[ar, idx] / (c + 1)
    return phy2log, rank, count


def _pack(weight: np.ndarray, num_packs: int):
    """Greedy balanced packing (EPLB `balanced_packing`): items in decreasing weight go to the
    lightest pack that still has room; each pack gets exactly n/num_packs items.
    weight [D, n] -> pack_index [D, n], rank_in_pack [D, n]."""
    d, n = weight.shape
    per_pack = n // num_packs
    if per_pack == 1:
        return np.broadcast_to(np.arange(n), (d, n)).copy(), np.zeros((d, n), dtype=np.int64)
    ar = np.arange(d)
    order = np.argsort(-weight, axis=1, kind="stable")
    pack_index = np.empty((d, n), dtype=np.int64)
    rank = np.empty((d, n), dtype=np.int64)
    # First round: the num_packs heaviest items each open an empty pack (greedy picks an
    # empty pack while one exists; ties between empty packs broken by index).
    first = order[:, :num_packs]
    pack_index[ar[:, None], first] = np.arange(num_packs)
    rank[ar[:, None], first] = 0
    loads = np.take_along_axis(weight, first, axis=1).astype(np.float64)
    counts = np.ones((d, num_packs), dtype=np.int64)
    for i in range(num_packs, n):
        p = np.argmin(loads, axis=1)  # full packs hold +inf
        item = order[:, i]
        c = counts[ar, p]
        pack_index[ar, item] = p
        rank[ar, item] = c
        counts[ar, p] = c + 1
        new = loads[ar, p] + weight[ar, item]
        loads[ar, p] = np.where(c + 1 >= per_pack, np.inf, new)
    return pack_index, rank


def _naive_home(num_experts: int, num_gpus: int) -> np.ndarray:
    """Contiguous placement: expert e on GPU floor(e * gpus / experts) (= e // (E/G))."""
    return (np.arange(num_experts) * num_gpus) // num_experts


def naive_gpu_load(weight: np.ndarray, num_gpus: int) -> np.ndarray:
    """[layers, gpus] load per GPU with the naive contiguous placement and no replicas."""
    w = np.asarray(weight, dtype=np.float64)
    home = _naive_home(w.shape[1], num_gpus)
    load = np.zeros((w.shape[0], num_gpus))
    np.add.at(load.T, home, w.T)
    return load


def _imbalance(gpu_load: np.ndarray) -> np.ndarray:
    """max/mean over GPUs per layer; 1.0 for a layer with no load."""
    mean = gpu_load.mean(axis=1)
    mx = gpu_load.max(axis=1)
    return np.where(mean > 0, mx / np.where(mean > 0, mean, 1.0), 1.0)


def _naive_phy2log(num_experts: int, num_gpus: int, per_gpu: int) -> np.ndarray:
    """Slots for the naive placement: GPU g holds its contiguous experts, its spare slots
    co-located replicas of its first expert (loads unchanged). A GPU with no own expert
    (experts < gpus) fills its slots with copies of expert g mod experts: its load is then
    per_gpu * w/c <= w, not above that expert's home GPU, so the max never rises."""
    home = _naive_home(num_experts, num_gpus)
    n_own = np.bincount(home, minlength=num_gpus)
    start = np.searchsorted(home, np.arange(num_gpus))  # first expert of each GPU
    j = np.arange(per_gpu)[None, :]
    own = start[:, None] + j
    fill = np.where(n_own[:, None] > 0, start[:, None], np.arange(num_gpus)[:, None] % num_experts)
    return np.where(j < n_own[:, None], own, fill).reshape(-1)


def _validate(w: np.ndarray, num_slots, num_groups, num_nodes, num_gpus) -> None:
    if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] < 1:
        raise ConfigError(f"weight: shape {w.shape} must be [layers >= 1, experts >= 1]")
    if not np.all(np.isfinite(w)):
        raise ConfigError("weight: contains NaN/inf; expert loads must be finite and >= 0")
    if np.any(w < 0):
        raise ConfigError("weight: contains negative loads; expert loads must be >= 0")
    with np.errstate(over="ignore"):
        if not np.all(np.isfinite(w.sum(axis=1))):  # shares are load / layer total: it must be a float
            raise ConfigError("weight: a layer's loads sum beyond the float64 range; scale the loads down")
    e = w.shape[1]
    sizes = {"num_slots": num_slots, "num_groups": num_groups, "num_nodes": num_nodes, "num_gpus": num_gpus}
    for name, v in sizes.items():
        if int(v) != v or v < 1:
            raise ConfigError(f"{name}: {v!r} must be a positive integer")
    check_layout(e, num_slots, num_gpus, num_nodes, num_groups)


LAYOUT_NAMES = {  # what the messages call the layout numbers: rebalance_experts' keywords
    "slots": "num_slots",
    "gpus": "num_gpus",
    "nodes": "num_nodes",
    "groups": "num_groups",
    "experts": "experts",
    "expert_count": "the expert count",
}


def check_layout(experts, slots, gpus, nodes, groups, names: dict = LAYOUT_NAMES) -> None:
    """EPLB's layout rules: slots >= experts, slots split evenly over GPUs, GPUs over nodes and
    experts over groups. The numbers are positive integers already; `names` words the messages
    (a CLI passes its flags)."""
    n = names
    for broken, key, value, rule in (
        (slots < experts, "slots", slots, f"must be >= {n['experts']} ({experts})"),
        (slots % gpus, "slots", slots, f"must be a multiple of {n['gpus']} ({gpus})"),
        (gpus % nodes, "gpus", gpus, f"must be a multiple of {n['nodes']} ({nodes})"),
        (experts % groups, "groups", groups, f"must divide {n['expert_count']} ({experts})"),
    ):
        if broken:
            raise ConfigError(f"{n[key]}: {value} {rule}")


# ----------------------------------------------------------------------------- public


def rebalance_experts(weight, num_slots: int, num_groups: int = 1, num_nodes: int = 1, num_gpus: int = 1) -> EplbResult:
    """EPLB placement for per-layer expert loads ``weight[layers, experts]``.

    Hierarchical policy when ``num_groups % num_nodes == 0`` (groups packed to nodes,
    replicas and GPUs node-local), global policy otherwise (source: deepseek-ai/EPLB
    ``rebalance_experts``). Raises ConfigError on bad shapes/divisibility.
    """
    try:
        w = np.asarray(weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError("weight: expected a [layers, experts] array of finite loads >= 0") from None
    if w.ndim == 1:
        w = w[None, :]
    _validate(w, num_slots, num_groups, num_nodes, num_gpus)
    num_slots, num_groups, num_nodes, num_gpus = map(int, (num_slots, num_groups, num_nodes, num_gpus))
    layers, experts = w.shape
    if num_groups % num_nodes == 0:
        # one node: the hierarchical steps reduce to the global policy, so label it that way
        policy = "hierarchical" if num_nodes > 1 else "global"
        groups, nodes = num_groups, num_nodes
    else:
        policy, groups, nodes = "global", 1, 1
    per_gpu = num_slots // num_gpus
    group_size = experts // groups
    groups_per_node = groups // nodes
    exp_per_node = experts // nodes
    slots_per_node = num_slots // nodes

    # (1) pack groups onto nodes (EPLB step 1); relabel experts node-major ("mlog")
    group_load = w.reshape(layers, groups, group_size).sum(axis=2)
    g_pack, g_rank = _pack(group_load, nodes)
    log2mlog = (((g_pack * groups_per_node + g_rank) * group_size)[:, :, None] + np.arange(group_size)).reshape(
        layers, experts
    )
    mlog2log = _inverse(log2mlog)
    # (2) replicate inside each node (rows = layers x nodes)
    w_mlog = np.take_along_axis(w, mlog2log, axis=1).reshape(layers * nodes, exp_per_node)
    phy2mlog, _, mlog_cnt = _replicate(w_mlog, slots_per_node)
    # (3) pack each node's physical experts onto its GPUs
    w_phy = np.take_along_axis(w_mlog / mlog_cnt, phy2mlog, axis=1)
    pack, rank = _pack(w_phy, num_gpus // nodes)
    pphy2phy = _inverse(pack * per_gpu + rank)
    pphy2mlog = np.take_along_axis(phy2mlog, pphy2phy, axis=1)
    pphy2mlog = (
        pphy2mlog.reshape(layers, nodes, slots_per_node) + (np.arange(nodes) * exp_per_node)[None, :, None]
    ).reshape(layers, num_slots)
    phy2log = np.take_along_axis(mlog2log, pphy2mlog, axis=1)

    # Safeguard: keep the naive placement for layers where greedy packing is worse.
    naive_load = naive_gpu_load(w, num_gpus)
    count = _replica_count(phy2log, experts)
    gpu_load = _gpu_load(w, phy2log, count, num_gpus)
    worse = gpu_load.max(axis=1) > naive_load.max(axis=1) * (1 + 1e-12)
    if np.any(worse):
        phy2log[worse] = _naive_phy2log(experts, num_gpus, per_gpu)
        count = _replica_count(phy2log, experts)
        gpu_load = _gpu_load(w, phy2log, count, num_gpus)

    slot_gpu = np.broadcast_to(np.arange(num_slots) // per_gpu, (layers, num_slots))
    return EplbResult(
        phy2log=_readonly(phy2log),
        slot_gpu=_readonly(slot_gpu),
        replica_count=_readonly(count),
        gpu_load=_readonly(gpu_load),
        imbalance_before=_readonly(_imbalance(naive_load)),
        imbalance_after=_readonly(_imbalance(gpu_load)),
        naive_kept=_readonly(worse),
        policy=policy,
    )


def _replica_count(phy2log: np.ndarray, experts: int) -> np.ndarray:
    layers = phy2log.shape[0]
    flat = (phy2log + (np.arange(layers) * experts)[:, None]).ravel()
    return np.bincount(flat, minlength=layers * experts).reshape(layers, experts)


def _gpu_load(w, phy2log, count, num_gpus) -> np.ndarray:
    # each replica carries load/replica_count (EPLB: tokens_per_phy = weight / logcnt)
    per_replica = w / count
    slot_load = np.take_along_axis(per_replica, phy2log, axis=1)
    return slot_load.reshape(w.shape[0], num_gpus, -1).sum(axis=2)


def zipf_load(experts: int, s: float, layers: int = 1, seed: int = 0) -> np.ndarray:
    """[layers, experts] expert popularity ∝ 1/rank^s (Zipf), rows sum to 1, the ranks
    randomly permuted per layer with ``numpy.random.default_rng(seed)``."""
    if int(experts) != experts or experts < 1:
        raise ConfigError(f"experts: {experts!r} must be a positive integer")
    if int(layers) != layers or layers < 1:
        raise ConfigError(f"layers: {layers!r} must be a positive integer")
    if not np.isfinite(s) or s < 0:
        raise ConfigError(f"zipf s: {s!r} must be a finite number >= 0")
    with np.errstate(over="ignore"):  # a huge s: every rank but the first underflows to 0
        pop = 1.0 / np.arange(1, int(experts) + 1, dtype=np.float64) ** float(s)
    pop /= pop.sum()
    rng = np.random.default_rng(seed)
    perm = np.argsort(rng.random((int(layers), int(experts))), axis=1)
    return pop[perm]
