// The tensor cores from WGSL: C += A·B with f16 operands and f32
// accumulation on cooperative matrices (wgpu's
// EXPERIMENTAL_COOPERATIVE_MATRIX and SHADER_F16, Vulkan's
// VK_KHR_cooperative_matrix). Each subgroup (32 lanes) keeps a 32×64 block
// of C as 2×4 accumulator tiles of 16×16 and reuses its A and B tiles from
// registers; 4 subgroups a workgroup (2 along M, 2 along N): a 64×128
// block of C a workgroup. Loads straight from global memory (no shared
// memory staging yet). The starting kernel of
// shared/design/coop-matrix/blocked.wgsl.
//
// Bindings:
//   a    : f16 [M, K], row-major
//   b    : f16 [K, N], row-major
//   c    : f32 [M, N], row-major (read and written: zero it for A·B)
//   dims : (M, N, K, 0); M a multiple of 64, N of 128, K of 16
// Dispatch: (N / 128, M / 64, 1) workgroups of 128.
//
// naga 29/30's SPIR-V writer panics ("Expression [N] is not cached") on a
// coopLoad/coopStore whose pointer index is an inline expression: every
// offset is bound to a `let` first.
enable f16;
enable wgpu_cooperative_matrix;

@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: vec4<u32>;

@compute @workgroup_size(128, 1, 1)
fn coop_matmul_nn(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let N = dims.y;
    let K = dims.z;
    let sg = li / 32u;
    let row = wg.y * 64u + (sg / 2u) * 32u;
    let col = wg.x * 128u + (sg % 2u) * 64u;
    let o00 = (row + 0u) * N + col + 0u;
    var c00 = coopLoadT<coop_mat16x16<f32, C>>(&c[o00], N);
    let o01 = (row + 0u) * N + col + 16u;
    var c01 = coopLoadT<coop_mat16x16<f32, C>>(&c[o01], N);
    let o02 = (row + 0u) * N + col + 32u;
    var c02 = coopLoadT<coop_mat16x16<f32, C>>(&c[o02], N);
    let o03 = (row + 0u) * N + col + 48u;
    var c03 = coopLoadT<coop_mat16x16<f32, C>>(&c[o03], N);
    let o10 = (row + 16u) * N + col + 0u;
    var c10 = coopLoadT<coop_mat16x16<f32, C>>(&c[o10], N);
    let o11 = (row + 16u) * N + col + 16u;
    var c11 = coopLoadT<coop_mat16x16<f32, C>>(&c[o11], N);
    let o12 = (row + 16u) * N + col + 32u;
    var c12 = coopLoadT<coop_mat16x16<f32, C>>(&c[o12], N);
    let o13 = (row + 16u) * N + col + 48u;
    var c13 = coopLoadT<coop_mat16x16<f32, C>>(&c[o13], N);
    for (var k: u32 = 0u; k < K; k += 16u) {
        let ao0 = (row + 0u) * K + k;
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&a[ao0], K);
        let ao1 = (row + 16u) * K + k;
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&a[ao1], K);
        let bo0 = k * N + col + 0u;
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&b[bo0], N);
        let bo1 = k * N + col + 16u;
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&b[bo1], N);
        let bo2 = k * N + col + 32u;
        let b2 = coopLoadT<coop_mat16x16<f16, B>>(&b[bo2], N);
        let bo3 = k * N + col + 48u;
        let b3 = coopLoadT<coop_mat16x16<f16, B>>(&b[bo3], N);
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c02 = coopMultiplyAdd(a0, b2, c02);
        c03 = coopMultiplyAdd(a0, b3, c03);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
        c12 = coopMultiplyAdd(a1, b2, c12);
        c13 = coopMultiplyAdd(a1, b3, c13);
    }
    coopStoreT(c00, &c[o00], N);
    coopStoreT(c01, &c[o01], N);
    coopStoreT(c02, &c[o02], N);
    coopStoreT(c03, &c[o03], N);
    coopStoreT(c10, &c[o10], N);
    coopStoreT(c11, &c[o11], N);
    coopStoreT(c12, &c[o12], N);
    coopStoreT(c13, &c[o13], N);
}
