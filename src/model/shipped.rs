//! The trained checkpoints shipped with the program (`assets/checkpoints/`),
//! so a class can open a lesson on a model that already writes
//! pseudo-Shakespeare. Each was trained by our own CLI; the README gives the
//! command and `tests/shipped.rs` checks that it reproduces tiny's weights.

/// (name, the command that made it, its bytes).
pub const SHIPPED: &[(&str, &str, &[u8])] = &[
    (
        "tiny",
        "tinygpt train --preset tiny --backend cpu --seed 1337 --out assets/checkpoints/tiny.safetensors",
        include_bytes!("../../assets/checkpoints/tiny.safetensors"),
    ),
    (
        "small",
        "tinygpt train --preset small --backend cpu --seed 1337 --out assets/checkpoints/small.safetensors",
        include_bytes!("../../assets/checkpoints/small.safetensors"),
    ),
];

/// A shipped checkpoint's bytes by name.
pub fn shipped(name: &str) -> Option<&'static [u8]> {
    SHIPPED
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, b)| *b)
}
