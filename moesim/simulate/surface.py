"""Cost surfaces: every forward pass a simulation runs, priced ONCE per configuration by the one
evaluation path (`moesim.engine.pricing.evaluate_grid`) over a grid of pass shapes, then looked up
by multilinear interpolation (never a re-pricing per step).

Three pass kinds (the engines' forward modes):

* decode(b, ctx): a decode step of b requests per DP group at a mean KV length ctx (tokens). Tabled
  at every integer batch (the step is not smooth in b: GEMM tiles, CUDA-graph buckets) and at
  geometric KV knots; linear in ctx between knots (attention reads the KV linearly).
* prefill(T, L): a prefill-only pass of T prompt tokens per DP group whose attention costs as much
  as prompts of length L (SGLang's extend pass; a PD prefill server). `effective_length` turns a
  mix of chunks with cached prefixes into L: causal attention over a chunk of c new tokens after p
  tokens already in the KV costs c (p + c / 2) query-key pairs, and the grid's prefill of T tokens
  at context L prices T L / 2 of them, so L = sum c (2p + c) / sum c.
* fused(b, ctx, T, L, f): one decode-phase pass carrying b decode requests and a chunk of T prompt
  tokens on the busiest rank (vLLM V1 / TRT-LLM fused chunked prefill; SGLang with DP attention,
  whose ranks run their passes in lock step), f = the share of the DP ranks' chunk tokens the
  experts see relative to T on every rank (evaluate_grid's chunk mean = f T).

Units: seconds per pass; tokens per DP group.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from moesim.engine.pricing import evaluate_grid
from moesim.enums import Phase
from moesim.grid.core import Grid, replace

EXACT_BATCH = 128  # decode steps priced at every batch up to this (GEMM tiles, CUDA-graph buckets)


@dataclass(frozen=True)
class Deployment:
    """One serving instance as priced: model and hardware specs, its parallel layout as a one-row
    Grid (batch / context ignored), the overlap scheme and evaluate_grid's keywords."""

    model: object
    hw: object
    grid: Grid
    overlap: str | None = None
    kw: dict = field(default_factory=dict)  # engine, cost_mode, comm, expert_skew, profile_path, ...

    @property
    def dp(self) -> int:
        return int(self.grid.dp[0])

    @property
    def gpus(self) -> int:
        return int(self.grid.tp[0] * self.grid.dp[0])

    @property
    def q_len(self) -> float:
        return float(self.grid.q_len[0])

    @property
    def tokens_per_step(self) -> float:
        return float(self.grid.tokens_per_step[0])


def geometric_knots(lo: float, hi: float, n: int) -> np.ndarray:
    """n knots from lo to hi, geometric (integers, distinct, both ends included)."""
    k = np.unique(np.round(np.geomspace(max(lo, 1.0), max(hi, lo, 1.0), n)))
    return k.astype(float)


def _multilinear(axes: list[np.ndarray], table: np.ndarray, point) -> float:
    """Multilinear interpolation of `table` (shape = lengths of `axes`) at `point`, clamped to the
    knots' range (the surfaces span every shape the engine can run): the 2^d block around the point,
    contracted one axis at a time."""
    cut, wts = [], []
    for ax, x in zip(axes, point):
        if ax.size == 1:
            cut.append(slice(0, 1))
            wts.append(None)
            continue
        j = min(max(bisect.bisect_right(ax, x) - 1, 0), ax.size - 2)
        lo, hi = ax[j], ax[j + 1]
        cut.append(slice(j, j + 2))
        wts.append(min(max((x - lo) / (hi - lo), 0.0), 1.0))
    block = table[tuple(cut)]
    for w in wts:
        block = block[0] if w is None else block[0] * (1.0 - w) + block[1] * w
    return float(block)


@dataclass
class Surfaces:
    """Pass times of one deployment (module doc). `decode_table[i]` holds the step at batch
    `batch_knots[i]` over `ctx_knots` (every batch up to `EXACT_BATCH`, geometric knots above,
    linear between); `graph_max_bs`: above it decode steps run eager (`decode_eager`)."""

    batch_knots: np.ndarray
    ctx_knots: np.ndarray
    decode_table: np.ndarray  # (n_batch, n_ctx), CUDA-graph replay
    decode_eager: np.ndarray | None  # (n_batch, n_ctx) or None when every batch is graphed
    graph_max_bs: int
    prefill_axes: list | None = None  # [T knots, L knots]
    prefill_table: np.ndarray | None = None
    fused_axes: list | None = None  # [b, ctx, T, L, f]
    fused_table: np.ndarray | None = None
    evaluations: int = 0  # pass shapes priced
    _rows: dict = field(default_factory=dict, repr=False)

    @property
    def max_batch(self) -> int:
        return int(self.batch_knots[-1])

    def decode_row(self, b: int) -> np.ndarray:
        """The decode step at batch b over the KV knots (linear between batch knots)."""
        b = min(max(int(b), 1), self.max_batch)
        row = self._rows.get(b)
        if row is None:
            tab = self.decode_eager if self.decode_eager is not None and b > self.graph_max_bs else self.decode_table
            j = min(int(np.searchsorted(self.batch_knots, b)), self.batch_knots.size - 1)
            if self.batch_knots[j] == b or j == 0:
                row = tab[j]
            else:
                lo, hi = self.batch_knots[j - 1], self.batch_knots[j]
                w = (b - lo) / (hi - lo)
                row = (1.0 - w) * tab[j - 1] + w * tab[j]
            self._rows[b] = row
        return row

    def decode(self, b: int, ctx) -> np.ndarray:
        """Decode step(s) at batch b for mean KV length(s) ctx (array ok: a run of steps)."""
        return np.interp(ctx, self.ctx_knots, self.decode_row(b))

    def prefill(self, tokens: float, length: float) -> float:
        return _multilinear(self.prefill_axes, self.prefill_table, (tokens, length))

    def fused(self, b: float, ctx: float, tokens: float, length: float, share: float = 1.0) -> float:
        """A decode pass of b requests carrying `tokens` prompt tokens on the busiest rank; b = 0:
        the chunk alone (still a decode-phase pass: the engines' mixed forward mode)."""
        t = _multilinear(self.fused_axes, self.fused_table, (b, ctx, tokens, length, share))
        # a fused pass is never cheaper than the decode step it carries
        return max(t, float(self.decode(max(b, 1), ctx))) if b >= 1 else t


def effective_length(new_tokens, cached_tokens) -> float:
    """L of the module doc for chunks of new_tokens after cached_tokens already in the KV."""
    c = np.asarray(new_tokens, float)
    p = np.asarray(cached_tokens, float)
    s = c.sum()
    return float((c * (2.0 * p + c)).sum() / s) if s > 0 else 1.0


def _eval(dep: Deployment, grid: Grid, phase, **extra) -> np.ndarray:
    kw = dict(dep.kw)
    kw.update(extra)
    per_pass = {k: kw.pop(k) for k in ("cuda_graphs", "comm") if k in kw}  # settings of this pass
    kw["pricing"] = kw["pricing"].replace(**per_pass)
    overlap = dep.overlap
    if phase == Phase.PREFILL:
        from moesim.engine.serving import prefill_overlap  # lazy: only prefill surfaces need it

        overlap = prefill_overlap(overlap)
    ev, _ = evaluate_grid(dep.model, dep.hw, grid, phase=phase, overlap=overlap, **kw)
    t = np.asarray(ev.values["step_time_s"], float)
    bad = ~np.isfinite(t)
    if bad.any() and overlap is not None:
        # a pass too small for the scheme's micro-batches runs unsplit, as the engines do (SGLang's
        # two-batch overlap is skipped for a batch it cannot split): the engine default scheme
        sub = grid.take(np.flatnonzero(bad))
        sk = dict(kw)
        if sk.get("chunk") is not None:
            sk["chunk"] = tuple(np.asarray(c)[bad] for c in sk["chunk"])
        ev2, _ = evaluate_grid(dep.model, dep.hw, sub, phase=phase, overlap=None, **sk)
        t[bad] = np.asarray(ev2.values["step_time_s"], float)
    if not np.all(np.isfinite(t)):  # a pass shape the deployment cannot run (never silently priced)
        bad = int(np.argmin(np.isfinite(t)))
        raise ValueError(f"pass not priceable: batch {grid.batch[bad]:g}, context {grid.context[bad]:g} ({phase})")
    return t


def _rows(dep: Deployment, **axes) -> Grid:
    """The deployment's layout broadcast over the given (batch, context) arrays."""
    n = np.broadcast(*axes.values()).size
    g = dep.grid
    return replace(g.take(np.zeros(n, int)), **{k: np.broadcast_to(v, (n,)).astype(float) for k, v in axes.items()})


_CACHE: dict = {}


def build(dep: Deployment, **kw) -> Surfaces:
    """`price` with a memo: simulations of one deployment (validation cases, candidates verified
    at several loads) price its surfaces once per process."""
    g = dep.grid
    key = (repr(dep.model), repr(dep.hw), tuple(float(getattr(g, a)[0]) for a in ("tp", "dp", "ep", "moe_tp", "mtp",
           "acceptance", "redundant")), dep.overlap, tuple(sorted((k, str(v)) for k, v in dep.kw.items())),
           tuple(sorted(kw.items())))  # fmt: skip
    if key not in _CACHE:
        if len(_CACHE) >= 16:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = price(dep, **kw)
    return _CACHE[key]


def price(dep: Deployment, *, max_batch: int, max_context: float, budget_tokens: float, prefill: bool,
          fused: bool, graph_max_bs: int | None = None, prefill_eager: bool = True, n_ctx: int = 10,
          n_tokens: int = 14, n_len: int = 8, fused_comm=None) -> Surfaces:  # fmt: skip
    """Price the pass shapes a simulation of `dep` can run: decode at every batch 1..max_batch,
    prefill-only passes (`prefill`) and fused passes (`fused`) up to `budget_tokens` per pass and
    prompts / contexts up to `max_context`. graph_max_bs: the engine's CUDA-graph capture limit
    (None: every decode batch graphed); prefill_eager: prefill passes launch eagerly; fused_comm: the
    all-to-all of fused passes when it differs from the deployment's (SGLang extends on DeepEP normal)."""
    max_batch = max(int(max_batch), 1)
    max_context = max(float(max_context), 2.0)
    ctx = geometric_knots(1.0, max_context, n_ctx)
    gmax = max_batch if graph_max_bs is None else int(graph_max_bs)
    b = np.arange(1, min(max_batch, EXACT_BATCH) + 1, dtype=float)
    if max_batch > EXACT_BATCH:  # the step is smooth in b at large batches: geometric knots
        extra = geometric_knots(EXACT_BATCH, max_batch, 24)
        b = np.unique(np.concatenate([b, extra, [gmax, gmax + 1] if gmax < max_batch else []]))
    B, C = np.meshgrid(b, ctx, indexing="ij")
    g = _rows(dep, batch=B.ravel(), context=C.ravel())
    table = _eval(dep, g, Phase.DECODE, cuda_graphs=True).reshape(B.shape)
    eager = None
    count = g.size
    if gmax < max_batch:
        sel = b > gmax
        ge = _rows(dep, batch=B[sel].ravel(), context=C[sel].ravel())
        eager = table.copy()
        eager[sel] = _eval(dep, ge, Phase.DECODE, cuda_graphs=False).reshape(-1, ctx.size)
        count += ge.size
    s = Surfaces(b, ctx, table, eager, gmax)
    toks = geometric_knots(1.0, max(budget_tokens, 1.0), n_tokens)
    lens = geometric_knots(1.0, 2.0 * max_context, n_len)  # L up to 2p + c
    if prefill:
        T, L = np.meshgrid(toks, lens, indexing="ij")
        gp = _rows(dep, batch=T.ravel(), context=L.ravel())
        gp = replace(gp, mtp=np.zeros(gp.size))
        s.prefill_axes = [toks, lens]
        extra = {} if fused_comm is None else {"comm": fused_comm}
        s.prefill_table = _eval(dep, gp, Phase.PREFILL, cuda_graphs=not prefill_eager, **extra).reshape(T.shape)
        count += gp.size
    if fused:
        bk = np.unique(np.concatenate([[1.0], geometric_knots(1.0, max_batch, 8)]))
        ck = geometric_knots(1.0, max_context, 5)
        shares = np.array([1.0]) if dep.dp <= 1 else np.unique([1.0 / dep.dp, 0.5, 1.0])
        Bf, Cf, Tf, Lf, Ff = np.meshgrid(bk, ck, toks, lens, shares, indexing="ij")
        gf = _rows(dep, batch=Bf.ravel(), context=Cf.ravel())
        chunk = (Tf.ravel(), Lf.ravel(), Tf.ravel() * Ff.ravel())
        # b below 1 (a lock-step pass in which no rank decodes) is looked up at b = 1 (clamped)
        s.fused_axes = [bk, ck, toks, lens, shares]
        extra = {} if fused_comm is None else {"comm": fused_comm}
        s.fused_table = _eval(dep, gf, Phase.DECODE, cuda_graphs=not prefill_eager, chunk=chunk,
                              **extra).reshape(Bf.shape)  # fmt: skip
        count += gf.size
    s.evaluations = count
    return s


__all__ = ["Deployment", "Surfaces", "build", "price", "effective_length", "geometric_knots"]
