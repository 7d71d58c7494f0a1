//! The 128×128-tile matmul kernels (`matmul_{nt,nn,tn}_128`) against the
//! CPU. The plan takes them only where a matmul has many such tiles, which
//! no shape small enough for lavapipe reaches; this test binary (a process
//! of its own) lowers that bar to one tile before any plan is made, so every
//! matmul without split-K runs on them, at ragged shapes.

mod common;

use common::config;
use common::parity::per_op_parity;

#[test]
fn every_kernel_matches_the_cpu_with_128_tiles() {
    // SAFETY: set before any thread of this process reads the environment
    // (the plan reads it once, below).
    unsafe { std::env::set_var("TINYGPT_MATMUL_128_MIN_TILES", "1") };
    assert_eq!(tinygpt::gpu::big_tile_min(), 1);
    assert_eq!(
        tinygpt::gpu::matmul_kernel("matmul_nn", 39, 20),
        ("matmul_nn_128", 128)
    );
    // C = 20 (3C = 60, 4C = 80), T = 13, B = 3: every size inside one tile.
    per_op_parity(&config(1, 2, 20, 13, 3, 0.0));
    // C = 44 (4C = 176), T = 67, B = 3 (B·T = 201): two ragged tiles each
    // way; K = 44 and 176 are not multiples of the 16-deep k-slices.
    per_op_parity(&config(1, 2, 44, 67, 3, 0.0));
}
