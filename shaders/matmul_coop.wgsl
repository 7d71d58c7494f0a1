// matmul_coop.wgsl — the linears' matmuls on the tensor cores (`--precision
// mixed`, issue 51): matmul.wgsl's three layouts with f16 operands and f32
// accumulation on cooperative matrices (wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX
// and SHADER_F16, Vulkan's VK_KHR_cooperative_matrix). The tensors stay f32 in
// memory: each operand is rounded to f16 as it is staged into workgroup
// memory, so the master weights, the activations and every other op are the
// f32 program's.
//
// Bindings (group 0), matmul.wgsl's (A and B read as vec4<f32> in the vec4
// build, below):
//   @binding(0) a:    array<f32>        operand A (layout below)
//   @binding(1) b:    array<f32>        operand B (layout below)
//   @binding(2) c:    array<f32>        C (M, N) row-major; read too when ACCUMULATE
//   @binding(3) bias: array<f32>        (N), added when HAS_BIAS
//   @binding(4) p:    MatmulParams      sizes, flags, alpha, split-K
//
// Layouts (all row-major):
//   matmul_coop_nt: C = alpha·A·Bᵀ   A (M, K), B (N, K)   linear forward, LM head
//   matmul_coop_nn: C = alpha·A·B    A (M, K), B (K, N)   dinp = dout · W
//   matmul_coop_tn: C = alpha·Aᵀ·B   A (K, M), B (K, N)   dW = doutᵀ · inp
// then C = that + (ACCUMULATE ? C : 0) + (HAS_BIAS ? bias : 0). Split-K as
// matmul.wgsl: workgroup z walks K in [z·k_split, (z+1)·k_split) and writes its
// raw partial to c[z·M·N + …]; matmul.wgsl's matmul_split_reduce finishes.
//
// Workgroup: a template that gpu/coop.rs fills per configuration
// (`CoopKernel`: the subgroups' grid, their tiles, BK, one or two stages).
// THREADS = 32 · SG_M · SG_N lanes (the adapter's subgroups must be 32 wide:
// gpu/coop.rs checks) compute a 128×128 block of C; each subgroup a WM×WN
// part of it, as TM×TN accumulator tiles of 16×16 (coop_mat16x16<f32, C>).
// K is walked BK at a time: all threads stage A's 128×BK and B's BK×128
// block (guarded, edges zero-filled, so any M, K, N works), rounded to f16,
// into workgroup memory, coalesced in whichever direction the layout stores
// contiguously; then each subgroup loads its A and B tiles from there
// (coopLoad/coopLoadT) and multiplies. With STAGES = 2 the blocks are
// double-buffered: the next step is stored into the other stage while this
// one is multiplied, one barrier a step.
// Twelve builds of each configuration, one a layout, kind and epilogue, each
// with its one entry point (gpu/coop.rs fills in FORM, VEC4, ACCUMULATING,
// ENTRY, the operands' types and the per-configuration code): where the operands' contiguous
// sizes are multiples of 4 (every preset's), `matmul_coop4_*` binds A and B
// as vec4<f32>, each thread fetches 128·BK / (4·THREADS) vec4 of A and as
// many of B a step, and fetches the next step's into registers while the subgroups
// multiply (the global loads' latency hidden behind the tensor cores);
// elsewhere `matmul_coop_*` stages element by element.
// The epilogue stores each accumulator tile to a 16×16 f32 scratch of the
// subgroup's and the 32 lanes write it out two rows (64 bytes each) at a
// time, guarded, with alpha, the bias and what C held (when accumulating,
// loaded first, all 8 of a lane's at once). Dispatch:
// (ceil(N / 128), ceil(M / 128), splits).
//
// An operand beyond f16's range (±65504) becomes ±inf in the conversion, so
// the gradients of an overflowing step are not finite: the loss scaler
// (adamw.wgsl) skips that step and halves its scale.
//
// naga 30's SPIR-V writer panics ("Expression [N] is not cached") on a
// coopLoad/coopStore whose pointer index is an inline expression: every
// offset is bound to a `let` first.

struct MatmulParams {
    m: u32,
    k: u32,
    n: u32,
    flags: u32,
    alpha: f32,
    // K per split and the number of splits; 1 split = no split-K
    k_split: u32,
    splits: u32,
    _pad0: u32,
}

const ACCUMULATE: u32 = 1u;
const HAS_BIAS: u32 = 2u;
const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = {{BK}}u;
const THREADS: u32 = {{THREADS}}u;
// Subgroups along N, and a subgroup's rows and columns of the block.
const SG_N: u32 = {{SG_N}}u;
const WM: u32 = {{WM}}u;
const WN: u32 = {{WN}}u;
// Row strides of the staged blocks, in halves: padded by 8 (16 bytes, which
// keeps every tile's start 16-byte aligned) against bank conflicts. AS: a
// K-contiguous block (128 rows of BK); BS: an M- or N-contiguous one (BK
// rows of 128).
const AS: u32 = BK + 8u;
const BS: u32 = 136u;
// Halves one stage of a block takes: max(128 · AS, BK · BS).
const STAGE: u32 = {{STAGE}}u;
// vec4 along K in a row of a K-contiguous block.
const KQ: u32 = BK / 4u;

const LAYOUT_NT: u32 = 0u;
const LAYOUT_NN: u32 = 1u;
const LAYOUT_TN: u32 = 2u;

const VEC4: bool = {{VEC4}};
// The build for products that accumulate into C (`matmul_coop*_acc_*`):
// its epilogue loads C's old values before storing (accumulate_tile).
const ACCUMULATING: bool = {{ACCUMULATING}};
// The layout this module computes (a constant, so the cooperative loads'
// control flow is uniform: naga refuses them under a branch on a value).
const FORM: u32 = {{FORM}};

// A and B: array<f32>, or array<vec4<f32>> in the vec4 build.
@group(0) @binding(0) var<storage, read> a: array<{{OPERAND}}>;
@group(0) @binding(1) var<storage, read> b: array<{{OPERAND}}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<uniform> p: MatmulParams;

// A's block (row r of the workgroup's 128, k = k0 + kk) and B's (k, column
// col), each stored the way its operand is in memory, so a lane's 4
// consecutive elements land in 4 consecutive halves (a transposing store
// put 16 lanes on one bank): K-contiguous A at As[r * AS + kk], M-contiguous
// A (Aᵀ·B) at As[kk * BS + r]; N-contiguous B at Bs[kk * BS + col],
// K-contiguous B (A·Bᵀ) at Bs[col * AS + kk], each stage at `base`. The
// tiles are then loaded row-major (coopLoadT) or column-major (coopLoad) to
// match (a_at, b_at).
var<workgroup> As: array<f16, {{STAGED}}>;
var<workgroup> Bs: array<f16, {{STAGED}}>;
// One 16×16 accumulator tile per subgroup on its way out.
var<workgroup> Cs: array<f32, {{CS}}>;

// Element i and vec4 i of A and B in either build (the build's unused pair
// is never called; it only has to type-check).
{{ACCESSORS}}

// A(row, k) of the product, zero outside.
fn load_a(row: u32, k: u32, k_end: u32) -> f32 {
    if (row >= p.m || k >= k_end) { return 0.0; }
    if (FORM == LAYOUT_TN) { return a1(k * p.m + row); }
    return a1(row * p.k + k);
}

// B(k, col) of the product, zero outside.
fn load_b(k: u32, col: u32, k_end: u32) -> f32 {
    if (col >= p.n || k >= k_end) { return 0.0; }
    if (FORM == LAYOUT_NT) { return b1(col * p.k + k); }
    return b1(k * p.n + col);
}

// The vec4 build: fetch i of this thread, 4 consecutive elements along the
// operand's contiguous side, zero outside (the contiguous sizes are
// multiples of 4, so a vec4 is wholly inside or wholly outside).
// A K-contiguous (A·Bᵀ, A·B): 128 rows × KQ vec4; A M-contiguous (Aᵀ·B):
// BK k × 32 vec4 of rows.
fn fetch_a(i: u32, tid: u32, row0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    let idx = tid + i * THREADS;
    if (FORM == LAYOUT_TN) {
        let kk = idx / 32u;
        let q = idx % 32u;
        if (k0 + kk >= k_end || row0 + 4u * q >= p.m) { return vec4<f32>(0.0); }
        return a4((k0 + kk) * (p.m / 4u) + row0 / 4u + q);
    }
    let r = idx / KQ;
    let q = idx % KQ;
    if (row0 + r >= p.m || k0 + 4u * q >= k_end) { return vec4<f32>(0.0); }
    return a4((row0 + r) * (p.k / 4u) + k0 / 4u + q);
}

fn put_a(i: u32, tid: u32, v: vec4<f32>, base: u32) {
    let h = vec4<f16>(v);
    let idx = tid + i * THREADS;
    var o: u32;
    if (FORM == LAYOUT_TN) {
        o = base + (idx / 32u) * BS + 4u * (idx % 32u);
    } else {
        o = base + (idx / KQ) * AS + 4u * (idx % KQ);
    }
    As[o] = h.x;
    As[o + 1u] = h.y;
    As[o + 2u] = h.z;
    As[o + 3u] = h.w;
}

// B N-contiguous (A·B, Aᵀ·B): BK k × 32 vec4 of columns; B K-contiguous
// (A·Bᵀ): 128 columns × KQ vec4.
fn fetch_b(i: u32, tid: u32, col0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    let idx = tid + i * THREADS;
    if (FORM == LAYOUT_NT) {
        let cc = idx / KQ;
        let q = idx % KQ;
        if (col0 + cc >= p.n || k0 + 4u * q >= k_end) { return vec4<f32>(0.0); }
        return b4((col0 + cc) * (p.k / 4u) + k0 / 4u + q);
    }
    let kk = idx / 32u;
    let q = idx % 32u;
    if (k0 + kk >= k_end || col0 + 4u * q >= p.n) { return vec4<f32>(0.0); }
    return b4((k0 + kk) * (p.n / 4u) + col0 / 4u + q);
}

fn put_b(i: u32, tid: u32, v: vec4<f32>, base: u32) {
    let h = vec4<f16>(v);
    let idx = tid + i * THREADS;
    var o: u32;
    if (FORM == LAYOUT_NT) {
        o = base + (idx / KQ) * AS + 4u * (idx % KQ);
    } else {
        o = base + (idx / 32u) * BS + 4u * (idx % 32u);
    }
    Bs[o] = h.x;
    Bs[o + 1u] = h.y;
    Bs[o + 2u] = h.z;
    Bs[o + 3u] = h.w;
}

// Where A(r, kk) and B(kk, col) of the stage at `base` are in workgroup memory.
fn a_at(base: u32, r: u32, kk: u32) -> u32 {
    if (FORM == LAYOUT_TN) { return base + kk * BS + r; }
    return base + r * AS + kk;
}

fn b_at(base: u32, kk: u32, col: u32) -> u32 {
    if (FORM == LAYOUT_NT) { return base + col * AS + kk; }
    return base + kk * BS + col;
}

// A's 16×16 tile at rows r.., k kk.. of the stage: row-major where A is
// K-contiguous, column-major where it is M-contiguous.
fn a_tile(base: u32, r: u32, kk: u32) -> coop_mat16x16<f16, A> {
    let o = a_at(base, r, kk);
    if (FORM == LAYOUT_TN) { return coopLoad<coop_mat16x16<f16, A>>(&As[o], BS); }
    return coopLoadT<coop_mat16x16<f16, A>>(&As[o], AS);
}

// B's 16×16 tile at k kk.., columns col..: row-major where B is
// N-contiguous, column-major where it is K-contiguous.
fn b_tile(base: u32, kk: u32, col: u32) -> coop_mat16x16<f16, B> {
    let o = b_at(base, kk, col);
    if (FORM == LAYOUT_NT) { return coopLoad<coop_mat16x16<f16, B>>(&Bs[o], AS); }
    return coopLoadT<coop_mat16x16<f16, B>>(&Bs[o], BS);
}

// The element build: stages A's 128×BK and B's BK×128 block at k0 as f16
// into the stage at `base`; consecutive threads read consecutive addresses
// in every layout.
fn stage(tid: u32, row0: u32, col0: u32, k0: u32, k_end: u32, base: u32) {
    for (var i = 0u; i < BM * BK / THREADS; i++) {
        let idx = tid + i * THREADS;
        var r: u32;
        var kk: u32;
        if (FORM == LAYOUT_TN) {
            r = idx % BM;
            kk = idx / BM;
        } else {
            r = idx / BK;
            kk = idx % BK;
        }
        As[a_at(base, r, kk)] = f16(load_a(row0 + r, k0 + kk, k_end));
        var col: u32;
        var kb: u32;
        if (FORM == LAYOUT_NT) {
            col = idx / BK;
            kb = idx % BK;
        } else {
            col = idx % BN;
            kb = idx / BN;
        }
        Bs[b_at(base, kb, col)] = f16(load_b(k0 + kb, col0 + col, k_end));
    }
}

// Writes the 16×16 tile the subgroup just stored at Cs[so..] to C's rows
// r0.., columns c0.. (split z's partial when split-K): lane l writes
// column l % 16 of rows 2e + l / 16, so each store covers two whole rows.
fn write_tile(so: u32, lane: u32, r0: u32, c0: u32, z: u32) {
    if (ACCUMULATING && p.splits == 1u && (p.flags & ACCUMULATE) != 0u) {
        accumulate_tile(so, lane, r0, c0);
        return;
    }
    for (var e = 0u; e < 8u; e++) {
        let idx = e * 32u + lane;
        let row = r0 + idx / 16u;
        let col = c0 + idx % 16u;
        if (row < p.m && col < p.n) {
            let v = Cs[so + idx];
            let i = row * p.n + col;
            if (p.splits > 1u) {
                c[z * p.m * p.n + i] = v;
            } else {
                var x = p.alpha * v;
                if ((p.flags & ACCUMULATE) != 0u) { x += c[i]; }
                if ((p.flags & HAS_BIAS) != 0u) { x += bias[col]; }
                c[i] = x;
            }
        }
    }
}

// Element e (0..8) of the tile that lane `lane` writes (write_tile's): its
// index in C, and whether it is inside C.
fn tile_element(lane: u32, r0: u32, c0: u32, e: u32) -> vec2<u32> {
    let idx = e * 32u + lane;
    let row = r0 + idx / 16u;
    let col = c0 + idx % 16u;
    return vec2<u32>(row * p.n + col, u32(row < p.m && col < p.n));
}

// What C holds at element e (0 outside C).
fn prior(lane: u32, r0: u32, c0: u32, e: u32) -> f32 {
    let at = tile_element(lane, r0, c0, e);
    if (at.y != 0u) { return c[at.x]; }
    return 0.0;
}

// Element e of the stored tile, with alpha, plus `before` (what C held) and
// the bias, into C.
fn accumulate_element(so: u32, lane: u32, r0: u32, c0: u32, e: u32, before: f32) {
    let at = tile_element(lane, r0, c0, e);
    if (at.y == 0u) { return; }
    var x = p.alpha * Cs[so + e * 32u + lane] + before;
    if ((p.flags & HAS_BIAS) != 0u) { x += bias[c0 + (e * 32u + lane) % 16u]; }
    c[at.x] = x;
}

// write_tile where the product accumulates into C (dX += dout·W), in the
// builds for such products only (ACCUMULATING: in every build it cost the
// others registers, the forward's products 3% and dW's 8%): the 8
// elements' old values are loaded before any is stored (named values, in
// registers: a private array indexed in a loop spills), so the loads are in
// flight together rather than each waited for behind the store before it
// (the store may alias it). nanogpt-char's dX products: 7.3 → 4.5 ms a step.
fn accumulate_tile(so: u32, lane: u32, r0: u32, c0: u32) {
    let b0 = prior(lane, r0, c0, 0u);
    let b1 = prior(lane, r0, c0, 1u);
    let b2 = prior(lane, r0, c0, 2u);
    let b3 = prior(lane, r0, c0, 3u);
    let b4 = prior(lane, r0, c0, 4u);
    let b5 = prior(lane, r0, c0, 5u);
    let b6 = prior(lane, r0, c0, 6u);
    let b7 = prior(lane, r0, c0, 7u);
    accumulate_element(so, lane, r0, c0, 0u, b0);
    accumulate_element(so, lane, r0, c0, 1u, b1);
    accumulate_element(so, lane, r0, c0, 2u, b2);
    accumulate_element(so, lane, r0, c0, 3u, b3);
    accumulate_element(so, lane, r0, c0, 4u, b4);
    accumulate_element(so, lane, r0, c0, 5u, b5);
    accumulate_element(so, lane, r0, c0, 6u, b6);
    accumulate_element(so, lane, r0, c0, 7u, b7);
}

// Stores accumulator tile `acc` to the subgroup's scratch at Cs[so..] and
// writes it out (write_tile); every subgroup calls it alike, so the
// barriers are uniform.
fn emit_tile(acc: coop_mat16x16<f32, C>, so: u32, lane: u32, r0: u32, c0: u32, z: u32) {
    workgroupBarrier();
    coopStoreT(acc, &Cs[so], 16u);
    workgroupBarrier();
    write_tile(so, lane, r0, c0, z);
}

// The vec4 build's fetches of one K step, held in registers: this
// thread's 128·BK / (4·THREADS) vec4 of A and as many of B (fetch_a,
// fetch_b), as fields a0.., b0.. that gpu/coop.rs writes out.
struct Fetched {
{{FETCHED_FIELDS}}
}

fn fetch(tid: u32, row0: u32, col0: u32, k0: u32, k_end: u32) -> Fetched {
    return Fetched(
{{FETCH_CALLS}}
    );
}

// Stages a step's fetches into the stage at `base` as f16 (put_a, put_b).
fn put(tid: u32, f: Fetched, base: u32) {
{{PUT_CALLS}}
}

// Stages the block at k0 into the stage at `base`: the fetched registers
// in the vec4 build (then fetches the block at k_next into them, if any),
// element by element in the other.
fn stage_step(tid: u32, row0: u32, col0: u32, k0: u32, k_next: u32, k_end: u32, base: u32, fetched: ptr<function, Fetched>) {
    if (VEC4) {
        put(tid, *fetched, base);
        if (k_next < k_end) {
            *fetched = fetch(tid, row0, col0, k_next, k_end);
        }
    } else {
        stage(tid, row0, col0, k0, k_end, base);
    }
}

fn matmul_coop(wg: vec3<u32>, tid: u32) {
    let sg = tid / 32u;
    let lane = tid % 32u;
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    // The subgroup's WM×WN part of the block.
    let wr = (sg / SG_N) * WM;
    let wc = (sg % SG_N) * WN;
    let z = wg.z;
    let k_begin = z * p.k_split;
    let k_end = min(p.k, k_begin + p.k_split);

{{ACCUMULATORS}}

    // The vec4 build's first step, fetched into registers.
    var fetched = Fetched();
    if (VEC4) {
        fetched = fetch(tid, row0, col0, k_begin, k_end);
    }
{{K_LOOP}}

    // The epilogue: one tile at a time through the subgroup's scratch.
    let so = sg * 256u;
{{EPILOGUE}}
}

// The entry point: matmul_coop_{nt,nn,tn} in the element build,
// matmul_coop4_{nt,nn,tn} in the vec4 one (one a module).
@compute @workgroup_size({{THREADS}})
fn {{ENTRY}}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    matmul_coop(wg, tid);
}
