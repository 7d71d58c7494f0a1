// attention_coop.wgsl — causal multi-head FlashAttention-2 on the tensor cores
// (`--precision mixed`, issue 51): the products of attention.wgsl's training
// kernels (S = Q·Kᵀ and O = P·V forward; dP = dO·Vᵀ, dV = Pᵀ·dO, dK = dSᵀ·Q,
// dQ = dS·K backward) on cooperative matrices with f16 operands and f32
// accumulation; the softmax, its statistics (max, sum, log-sum-exp), the
// dropout mask and dS = P ∘ (dP − delta) stay in f32, element by element.
// Same function as attention.wgsl's (the CPU backend is the reference for
// both: tests/gpu.rs). As there, nothing T×T is ever held: scores live one
// 16×BLK block at a time in workgroup memory.
//
// Bindings (group 0), attention.wgsl's (one layout for both files), with the
// trace's slot holding the f16 copies:
//   @binding(0) qkv:   array<f32>  (B, T, 3C): q | k | v, head h at columns h·D..h·D+D of each
//   @binding(1) out:   array<f32>  (B, T, C) the attention output y (forward writes)
//   @binding(2) lse:   array<f32>  (B, H, T) log-sum-exp of each score row (forward writes)
//   @binding(3) dout:  array<f32>  (B, T, C) gradient of y (backward only)
//   @binding(4) dqkv:  array<f32>  (B, T, 3C) gradient of qkv, accumulated (+=)
//   @binding(5) delta: array<f32>  (B, H, T) rowsum(dout ∘ out) (attention.wgsl's
//                                  attention_backward_delta writes it first)
//   @binding(6) at:    AttnParams  sizes, scale 1/√D, dropout stream and probability
//   @binding(7) step:  StepUniform dropout seed, training flag
//   @binding(8) halves: array<f16> qkv as f16 (B·T + PAD rows of 3C), then dO as f16
//                                  (B·T + PAD rows of C) from DOUT_AT; the PAD rows
//                                  after each stay zero (gpu/coop.rs sizes it)
//
// The products read their tiles straight from `halves` (through the caches),
// so a workgroup is one subgroup of 32 lanes (gpu/coop.rs checks the adapter's
// subgroups are 32 wide) with a few KiB of workgroup memory: many to an SM,
// whose loads hide each other's latency, and a barrier costs one subgroup.
// D = the head size (a multiple of 16, at most 64: coop::attention_fits),
// DT = D / 16 tiles across it; a subgroup holds its 16 own rows' A tiles and
// its accumulators in registers (up to 4 each; those past DT compile away:
// DT is a constant).
//   attention_coop_qkv_f16   thread per element: halves[0..B·T·3C] = f16(qkv)
//   attention_coop_dout_f16  thread per element: halves[DOUT_AT..] = f16(dout)
//   attention_coop_forward   group (ceil(T / 16), b·H + h): 16 queries, two passes
//                            over the key blocks up to the diagonal. The first
//                            finds each row's max score m; the second sums
//                            l = Σ exp(S − m) and accumulates O = Σ P·V with
//                            P = exp(S − m) ∘ mask: m is final, so O is never
//                            rescaled (S is computed twice). out = O / l,
//                            lse = m + log l.
//   attention_coop_dkdv      group (ceil(T / 16), b·H + h): 16 keys, walking the
//                            query blocks from the diagonal down: Sᵀ = K·Qᵀ,
//                            dPᵀ = V·dOᵀ, then P = exp(S·scale − lse) and
//                            dS = P ∘ (dP ∘ mask − delta) element by element,
//                            dV += (P ∘ mask)ᵀ·dO, dK += dSᵀ·Q.
//   attention_coop_dq        group (ceil(T / 16), b·H + h): 16 queries, walking the
//                            key blocks up to the diagonal: S, dP, dS likewise,
//                            dQ += dS·K.
// dQ and dK/dV come from two kernels (no two workgroups write one element; no
// float atomics). A block that starts before T may reach past it (into the
// next sequence's rows, or the zero padding): every element past T is masked
// out, and its outputs are never written. Dropout multiplies P by the mask of
// element ((b·H + h)·T + i)·T + j, as attention.wgsl's kernels do.
//
// naga 30's SPIR-V writer panics on a coopLoad/coopStore whose pointer index
// is an inline expression: every offset is bound to a `let` first. The
// cooperative operations and barriers sit only in control flow that is
// uniform across the workgroup (loops over workgroup ids and uniforms,
// branches on constants).

const NEG_FLT_MAX: f32 = -3.4028234e38;
const D: u32 = {{HEAD_DIM}}u;
const DT: u32 = D / 16u;
// Rows of the other side a step, and its 16-row tiles.
const BLK: u32 = 32u;
const BT: u32 = BLK / 16u;
// Row strides of the 16×BLK scratch: f32 scores, f16 P and dS (padded
// against bank conflicts; rows stay 16-byte aligned).
const SFS: u32 = BLK + 4u;
const SHS: u32 = BLK + 8u;

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;
@group(0) @binding(4) var<storage, read_write> dqkv: array<f32>;
@group(0) @binding(5) var<storage, read_write> delta: array<f32>;
@group(0) @binding(6) var<uniform> at: AttnParams;
@group(0) @binding(7) var<uniform> step: StepUniform;
@group(0) @binding(8) var<storage, read_write> halves: array<f16>;

// S at sf[0..], dP at sf[16·SFS..]; P (or dS) in sh, dS beside P in sh2
// (dK/dV); per-row values shared between lanes in rows_f.
var<workgroup> sf: array<f32, 2u * 16u * SFS>;
var<workgroup> sh: array<f16, 16u * SHS>;
var<workgroup> sh2: array<f16, 16u * SHS>;
var<workgroup> rows_f: array<f32, 64>;

// Offset of element (b, t, part·C + h·D) in qkv / dqkv / halves' qkv copy;
// part 0 = q, 1 = k, 2 = v.
fn qkv_at(b: u32, t: u32, part: u32, h: u32) -> u32 {
    return (b * at.t + t) * 3u * at.c + part * at.c + h * at.d;
}

// Offset of (b, t, h·D) in out / dout.
fn y_at(b: u32, t: u32, h: u32) -> u32 {
    return (b * at.t + t) * at.c + h * at.d;
}

// Where dO's f16 copy starts in halves: after B·T + PAD rows of 3C
// (coop::attention_dout_offset).
fn dout_at() -> u32 {
    return (at.b * at.t + {{PAD_ROWS}}u) * 3u * at.c;
}

// Whether query i sees key j: both before T, and j ≤ i under the causal mask.
fn sees(i: u32, j: u32) -> bool {
    return i < at.t && j < at.t && (j <= i || !CAUSAL);
}

// P's multiplier at (i, j): dropout_scale(seed, stream, index, p), with the
// layer's key (dropout_key) computed once a kernel.
fn mask(key: u32, bh: u32, i: u32, j: u32) -> f32 {
    if (step.training != 0u && at.p > 0.0) {
        return dropout_keyed(key, (bh * at.t + i) * at.t + j, at.p);
    }
    return 1.0;
}

// Tiles of the f16 copies, 16 rows from row t: columns d.. of head h's part
// of qkv (row stride 3C), or of dO (row stride C); as an A operand or a B
// operand (row-major), or transposed as a B operand (column-major: Kᵀ, Qᵀ,
// Vᵀ, dOᵀ).
fn a_qkv(b: u32, t: u32, part: u32, h: u32, d: u32) -> coop_mat16x16<f16, A> {
    let o = qkv_at(b, t, part, h) + d;
    return coopLoadT<coop_mat16x16<f16, A>>(&halves[o], 3u * at.c);
}

fn b_qkv(b: u32, t: u32, part: u32, h: u32, d: u32) -> coop_mat16x16<f16, B> {
    let o = qkv_at(b, t, part, h) + d;
    return coopLoadT<coop_mat16x16<f16, B>>(&halves[o], 3u * at.c);
}

fn bt_qkv(b: u32, t: u32, part: u32, h: u32, d: u32) -> coop_mat16x16<f16, B> {
    let o = qkv_at(b, t, part, h) + d;
    return coopLoad<coop_mat16x16<f16, B>>(&halves[o], 3u * at.c);
}

fn a_dout(b: u32, t: u32, h: u32, d: u32) -> coop_mat16x16<f16, A> {
    let o = dout_at() + y_at(b, t, h) + d;
    return coopLoadT<coop_mat16x16<f16, A>>(&halves[o], at.c);
}

fn b_dout(b: u32, t: u32, h: u32, d: u32) -> coop_mat16x16<f16, B> {
    let o = dout_at() + y_at(b, t, h) + d;
    return coopLoadT<coop_mat16x16<f16, B>>(&halves[o], at.c);
}

fn bt_dout(b: u32, t: u32, h: u32, d: u32) -> coop_mat16x16<f16, B> {
    let o = dout_at() + y_at(b, t, h) + d;
    return coopLoad<coop_mat16x16<f16, B>>(&halves[o], at.c);
}

// The 16×16 tile kt of the f16 scratch, as an A operand.
fn a_sh(kt: u32) -> coop_mat16x16<f16, A> {
    let o = 16u * kt;
    return coopLoadT<coop_mat16x16<f16, A>>(&sh[o], SHS);
}

fn a_sh2(kt: u32) -> coop_mat16x16<f16, A> {
    let o = 16u * kt;
    return coopLoadT<coop_mat16x16<f16, A>>(&sh2[o], SHS);
}

// Stores a 16×16 accumulator row-major at sf[o..], row stride `stride`.
fn store_sf(acc: coop_mat16x16<f32, C>, o: u32, stride: u32) {
    coopStoreT(acc, &sf[o], stride);
}

// Adds `scale` times accumulator `acc` into dqkv's part `part` at rows r0..,
// columns d0.. of head h, through sf (stride 16): lane l adds column l % 16
// of rows 2e + l / 16, skipping rows past T.
fn add_tile(acc: coop_mat16x16<f32, C>, lane: u32, b: u32, h: u32, r0: u32, part: u32, d0: u32, scale: f32) {
    workgroupBarrier();
    store_sf(acc, 0u, 16u);
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let idx = e * 32u + lane;
        let t = r0 + idx / 16u;
        if (t < at.t) {
            let o = qkv_at(b, t, part, h) + d0 + idx % 16u;
            dqkv[o] += scale * sf[idx];
        }
    }
}

// Writes O's tile of columns d0.. for the 16 queries from r0, divided by
// each row's l (rows_f[32 + row]), to out, through sf.
fn out_tile(o_acc: coop_mat16x16<f32, C>, lane: u32, b: u32, h: u32, r0: u32, d0: u32) {
    workgroupBarrier();
    store_sf(o_acc, 0u, 16u);
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let idx = e * 32u + lane;
        let t = r0 + idx / 16u;
        if (t < at.t) {
            out[y_at(b, t, h) + d0 + idx % 16u] = sf[idx] / rows_f[32u + idx / 16u];
        }
    }
}

// A block of scores: the A tiles of 16 rows (one per 16 columns of the
// head, a0 first; those past D unused) times 16 rows t.. of part `part` of
// the qkv copy taken as Bᵀ, summed over the head's width (S = Q·Kᵀ with a
// query's tiles and part 1; Sᵀ = K·Qᵀ with a key's and part 0; dP = dO·Vᵀ
// with dO's and part 2).
fn scores_qkv(a0: coop_mat16x16<f16, A>, a1: coop_mat16x16<f16, A>, a2: coop_mat16x16<f16, A>, a3: coop_mat16x16<f16, A>,
              b: u32, t: u32, part: u32, h: u32) -> coop_mat16x16<f32, C> {
    var s = coopMultiplyAdd(a0, bt_qkv(b, t, part, h, 0u), coop_mat16x16<f32, C>());
    if (DT > 1u) { s = coopMultiplyAdd(a1, bt_qkv(b, t, part, h, 16u), s); }
    if (DT > 2u) { s = coopMultiplyAdd(a2, bt_qkv(b, t, part, h, 32u), s); }
    if (DT > 3u) { s = coopMultiplyAdd(a3, bt_qkv(b, t, part, h, 48u), s); }
    return s;
}

// [`scores_qkv`] against 16 rows of the dO copy: dPᵀ = V·dOᵀ with a key's
// v tiles.
fn scores_dout(a0: coop_mat16x16<f16, A>, a1: coop_mat16x16<f16, A>, a2: coop_mat16x16<f16, A>, a3: coop_mat16x16<f16, A>,
               b: u32, t: u32, h: u32) -> coop_mat16x16<f32, C> {
    var s = coopMultiplyAdd(a0, bt_dout(b, t, h, 0u), coop_mat16x16<f32, C>());
    if (DT > 1u) { s = coopMultiplyAdd(a1, bt_dout(b, t, h, 16u), s); }
    if (DT > 2u) { s = coopMultiplyAdd(a2, bt_dout(b, t, h, 32u), s); }
    if (DT > 3u) { s = coopMultiplyAdd(a3, bt_dout(b, t, h, 48u), s); }
    return s;
}

@compute @workgroup_size(256)
fn attention_coop_qkv_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < at.b * at.t * 3u * at.c; i += nwg.x * 256u) {
        halves[i] = f16(qkv[i]);
    }
}

@compute @workgroup_size(256)
fn attention_coop_dout_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let base = dout_at();
    for (var i = gid.x; i < at.b * at.t * at.c; i += nwg.x * 256u) {
        halves[base + i] = f16(dout[i]);
    }
}

@compute @workgroup_size(32)
fn attention_coop_forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let q0 = 16u * wg.x;
    let key = dropout_key(step.dropout_seed, at.stream);
    // The 16 queries as A tiles.
    let q_a0 = a_qkv(b, q0, 0u, h, 0u);
    var q_a1 = q_a0;
    var q_a2 = q_a0;
    var q_a3 = q_a0;
    if (DT > 1u) { q_a1 = a_qkv(b, q0, 0u, h, 16u); }
    if (DT > 2u) { q_a2 = a_qkv(b, q0, 0u, h, 32u); }
    if (DT > 3u) { q_a3 = a_qkv(b, q0, 0u, h, 48u); }
    // The softmax's lanes: row r, columns 16·half.. of a block, visited from
    // column r on (rows side by side hit different banks).
    let r = lane % 16u;
    let half = lane / 16u;
    let i = q0 + r;
    let last = select(at.t, min(q0 + 16u, at.t), CAUSAL);

    // Pass 1: the row's max scaled score.
    var m = NEG_FLT_MAX;
    for (var j0 = 0u; j0 < last; j0 += BLK) {
        for (var kt = 0u; kt < BT; kt++) {
            store_sf(scores_qkv(q_a0, q_a1, q_a2, q_a3, b, j0 + 16u * kt, 1u, h), 16u * kt, SFS);
        }
        workgroupBarrier();
        for (var c = 0u; c < 16u; c++) {
            let jj = 16u * half + (c + r) % 16u;
            if (sees(i, j0 + jj)) { m = max(m, sf[r * SFS + jj] * at.scale); }
        }
        workgroupBarrier();
    }
    // The two halves' maxima of each row.
    rows_f[lane] = m;
    workgroupBarrier();
    m = max(rows_f[r], rows_f[16u + r]);

    // Pass 2: l = Σ exp(S − m), O = Σ (exp(S − m) ∘ mask)·V.
    var l = 0.0;
    var o_0 = coop_mat16x16<f32, C>();
    var o_1 = coop_mat16x16<f32, C>();
    var o_2 = coop_mat16x16<f32, C>();
    var o_3 = coop_mat16x16<f32, C>();
    for (var j0 = 0u; j0 < last; j0 += BLK) {
        for (var kt = 0u; kt < BT; kt++) {
            store_sf(scores_qkv(q_a0, q_a1, q_a2, q_a3, b, j0 + 16u * kt, 1u, h), 16u * kt, SFS);
        }
        workgroupBarrier();
        for (var c = 0u; c < 16u; c++) {
            let jj = 16u * half + (c + r) % 16u;
            let j = j0 + jj;
            var pd = 0.0;
            if (sees(i, j)) {
                let p = exp(sf[r * SFS + jj] * at.scale - m);
                l += p;
                pd = p * mask(key, bh, i, j);
            }
            sh[r * SHS + jj] = f16(pd);
        }
        workgroupBarrier();
        for (var kt = 0u; kt < BT; kt++) {
            let j = j0 + 16u * kt;
            let p_a = a_sh(kt);
            o_0 = coopMultiplyAdd(p_a, b_qkv(b, j, 2u, h, 0u), o_0);
            if (DT > 1u) { o_1 = coopMultiplyAdd(p_a, b_qkv(b, j, 2u, h, 16u), o_1); }
            if (DT > 2u) { o_2 = coopMultiplyAdd(p_a, b_qkv(b, j, 2u, h, 32u), o_2); }
            if (DT > 3u) { o_3 = coopMultiplyAdd(p_a, b_qkv(b, j, 2u, h, 48u), o_3); }
        }
    }
    // The row's l from its two halves; lse; then out = O / l, a tile at a time.
    workgroupBarrier();
    rows_f[lane] = l;
    workgroupBarrier();
    l = rows_f[r] + rows_f[16u + r];
    if (half == 0u) {
        rows_f[32u + r] = l;
        if (i < at.t) { lse[bh * at.t + i] = m + log(l); }
    }
    out_tile(o_0, lane, b, h, q0, 0u);
    if (DT > 1u) { out_tile(o_1, lane, b, h, q0, 16u); }
    if (DT > 2u) { out_tile(o_2, lane, b, h, q0, 32u); }
    if (DT > 3u) { out_tile(o_3, lane, b, h, q0, 48u); }
}

@compute @workgroup_size(32)
fn attention_coop_dkdv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let j0 = 16u * wg.x;
    let key = dropout_key(step.dropout_seed, at.stream);
    // The 16 keys' k and v as A tiles.
    let k_a0 = a_qkv(b, j0, 1u, h, 0u);
    let v_a0 = a_qkv(b, j0, 2u, h, 0u);
    var k_a1 = k_a0;
    var k_a2 = k_a0;
    var k_a3 = k_a0;
    var v_a1 = v_a0;
    var v_a2 = v_a0;
    var v_a3 = v_a0;
    if (DT > 1u) { k_a1 = a_qkv(b, j0, 1u, h, 16u); v_a1 = a_qkv(b, j0, 2u, h, 16u); }
    if (DT > 2u) { k_a2 = a_qkv(b, j0, 1u, h, 32u); v_a2 = a_qkv(b, j0, 2u, h, 32u); }
    if (DT > 3u) { k_a3 = a_qkv(b, j0, 1u, h, 48u); v_a3 = a_qkv(b, j0, 2u, h, 48u); }
    var dk_0 = coop_mat16x16<f32, C>();
    var dk_1 = coop_mat16x16<f32, C>();
    var dk_2 = coop_mat16x16<f32, C>();
    var dk_3 = coop_mat16x16<f32, C>();
    var dv_0 = coop_mat16x16<f32, C>();
    var dv_1 = coop_mat16x16<f32, C>();
    var dv_2 = coop_mat16x16<f32, C>();
    var dv_3 = coop_mat16x16<f32, C>();
    // The element-wise lanes: query column `lane` of a block, all 16 keys.
    // The queries before the diagonal: causality skips them whole.
    let first = select(0u, j0, CAUSAL);
    for (var i0 = first; i0 < at.t; i0 += BLK) {
        // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: 16 keys × BLK queries.
        for (var qt = 0u; qt < BT; qt++) {
            let t = i0 + 16u * qt;
            store_sf(scores_qkv(k_a0, k_a1, k_a2, k_a3, b, t, 0u, h), 16u * qt, SFS);
            store_sf(scores_dout(v_a0, v_a1, v_a2, v_a3, b, t, h), 16u * SFS + 16u * qt, SFS);
        }
        workgroupBarrier();
        let i = i0 + lane;
        let ic = min(i, at.t - 1u);
        let lse_i = lse[bh * at.t + ic];
        let delta_i = delta[bh * at.t + ic];
        for (var r = 0u; r < 16u; r++) {
            let j = j0 + r;
            var pd = 0.0;
            var ds = 0.0;
            if (sees(i, j)) {
                let p = exp(sf[r * SFS + lane] * at.scale - lse_i);
                let mk = mask(key, bh, i, j);
                pd = p * mk;
                ds = p * (sf[16u * SFS + r * SFS + lane] * mk - delta_i);
            }
            sh[r * SHS + lane] = f16(pd);
            sh2[r * SHS + lane] = f16(ds);
        }
        workgroupBarrier();
        // dV += (P ∘ mask)ᵀ·dO, dK += dSᵀ·Q.
        for (var qt = 0u; qt < BT; qt++) {
            let t = i0 + 16u * qt;
            let p_a = a_sh(qt);
            let ds_a = a_sh2(qt);
            dv_0 = coopMultiplyAdd(p_a, b_dout(b, t, h, 0u), dv_0);
            dk_0 = coopMultiplyAdd(ds_a, b_qkv(b, t, 0u, h, 0u), dk_0);
            if (DT > 1u) {
                dv_1 = coopMultiplyAdd(p_a, b_dout(b, t, h, 16u), dv_1);
                dk_1 = coopMultiplyAdd(ds_a, b_qkv(b, t, 0u, h, 16u), dk_1);
            }
            if (DT > 2u) {
                dv_2 = coopMultiplyAdd(p_a, b_dout(b, t, h, 32u), dv_2);
                dk_2 = coopMultiplyAdd(ds_a, b_qkv(b, t, 0u, h, 32u), dk_2);
            }
            if (DT > 3u) {
                dv_3 = coopMultiplyAdd(p_a, b_dout(b, t, h, 48u), dv_3);
                dk_3 = coopMultiplyAdd(ds_a, b_qkv(b, t, 0u, h, 48u), dk_3);
            }
        }
    }
    // dK (times the scale, which S carried) and dV into dqkv, a tile at a time.
    add_tile(dk_0, lane, b, h, j0, 1u, 0u, at.scale);
    add_tile(dv_0, lane, b, h, j0, 2u, 0u, 1.0);
    if (DT > 1u) {
        add_tile(dk_1, lane, b, h, j0, 1u, 16u, at.scale);
        add_tile(dv_1, lane, b, h, j0, 2u, 16u, 1.0);
    }
    if (DT > 2u) {
        add_tile(dk_2, lane, b, h, j0, 1u, 32u, at.scale);
        add_tile(dv_2, lane, b, h, j0, 2u, 32u, 1.0);
    }
    if (DT > 3u) {
        add_tile(dk_3, lane, b, h, j0, 1u, 48u, at.scale);
        add_tile(dv_3, lane, b, h, j0, 2u, 48u, 1.0);
    }
}

@compute @workgroup_size(32)
fn attention_coop_dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let q0 = 16u * wg.x;
    let key = dropout_key(step.dropout_seed, at.stream);
    // The 16 queries' q and dO as A tiles; their lse and delta.
    let q_a0 = a_qkv(b, q0, 0u, h, 0u);
    let do_a0 = a_dout(b, q0, h, 0u);
    var q_a1 = q_a0;
    var q_a2 = q_a0;
    var q_a3 = q_a0;
    var do_a1 = do_a0;
    var do_a2 = do_a0;
    var do_a3 = do_a0;
    if (DT > 1u) { q_a1 = a_qkv(b, q0, 0u, h, 16u); do_a1 = a_dout(b, q0, h, 16u); }
    if (DT > 2u) { q_a2 = a_qkv(b, q0, 0u, h, 32u); do_a2 = a_dout(b, q0, h, 32u); }
    if (DT > 3u) { q_a3 = a_qkv(b, q0, 0u, h, 48u); do_a3 = a_dout(b, q0, h, 48u); }
    if (lane < 16u) {
        let i = min(q0 + lane, at.t - 1u);
        rows_f[lane] = lse[bh * at.t + i];
        rows_f[16u + lane] = delta[bh * at.t + i];
    }
    var dq_0 = coop_mat16x16<f32, C>();
    var dq_1 = coop_mat16x16<f32, C>();
    var dq_2 = coop_mat16x16<f32, C>();
    var dq_3 = coop_mat16x16<f32, C>();
    // The element-wise lanes: key column `lane` of a block, all 16 queries.
    // The keys past the last query: causality skips them.
    let last = select(at.t, min(q0 + 16u, at.t), CAUSAL);
    for (var j0 = 0u; j0 < last; j0 += BLK) {
        // S = Q·Kᵀ and dP = dO·Vᵀ: 16 queries × BLK keys.
        for (var kt = 0u; kt < BT; kt++) {
            let t = j0 + 16u * kt;
            store_sf(scores_qkv(q_a0, q_a1, q_a2, q_a3, b, t, 1u, h), 16u * kt, SFS);
            store_sf(scores_qkv(do_a0, do_a1, do_a2, do_a3, b, t, 2u, h), 16u * SFS + 16u * kt, SFS);
        }
        workgroupBarrier();
        let j = j0 + lane;
        for (var r = 0u; r < 16u; r++) {
            let i = q0 + r;
            var ds = 0.0;
            if (sees(i, j)) {
                let p = exp(sf[r * SFS + lane] * at.scale - rows_f[r]);
                ds = p * (sf[16u * SFS + r * SFS + lane] * mask(key, bh, i, j) - rows_f[16u + r]);
            }
            sh[r * SHS + lane] = f16(ds);
        }
        workgroupBarrier();
        // dQ += dS·K.
        for (var kt = 0u; kt < BT; kt++) {
            let t = j0 + 16u * kt;
            let ds_a = a_sh(kt);
            dq_0 = coopMultiplyAdd(ds_a, b_qkv(b, t, 1u, h, 0u), dq_0);
            if (DT > 1u) { dq_1 = coopMultiplyAdd(ds_a, b_qkv(b, t, 1u, h, 16u), dq_1); }
            if (DT > 2u) { dq_2 = coopMultiplyAdd(ds_a, b_qkv(b, t, 1u, h, 32u), dq_2); }
            if (DT > 3u) { dq_3 = coopMultiplyAdd(ds_a, b_qkv(b, t, 1u, h, 48u), dq_3); }
        }
    }
    // dQ (times the scale, which S carried) into dqkv, a tile at a time.
    add_tile(dq_0, lane, b, h, q0, 0u, 0u, at.scale);
    if (DT > 1u) { add_tile(dq_1, lane, b, h, q0, 0u, 16u, at.scale); }
    if (DT > 2u) { add_tile(dq_2, lane, b, h, q0, 0u, 32u, at.scale); }
    if (DT > 3u) { add_tile(dq_3, lane, b, h, q0, 0u, 48u, at.scale); }
}
