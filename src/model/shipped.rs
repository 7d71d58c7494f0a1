//! The trained checkpoints shipped with the program (`assets/checkpoints/`),
//! so a class can open a lesson on a model that already writes
//! pseudo-Shakespeare. Each was trained by our own CLI; the README gives the
//! command and `tests/shipped.rs` checks that it reproduces tiny's weights.
//! The browser build holds none of their bytes: the page fetches one when
//! it is opened, as it fetches the rest of the gallery
//! ([`crate::model::gallery::Entry::compiled_in`]).

/// A checkpoint's bytes, compiled in except in the browser build.
#[cfg(not(target_arch = "wasm32"))]
macro_rules! checkpoint {
    ($path:literal) => {
        include_bytes!($path)
    };
}
#[cfg(target_arch = "wasm32")]
macro_rules! checkpoint {
    ($path:literal) => {
        &[]
    };
}

/// (name, the command that made it, its bytes).
pub const SHIPPED: &[(&str, &str, &[u8])] = &[
    (
        "tiny",
        "tinygpt train --preset tiny --backend cpu --seed 1337 --out assets/checkpoints/tiny.safetensors",
        checkpoint!("../../assets/checkpoints/tiny.safetensors"),
    ),
    (
        "small",
        "tinygpt train --preset small --backend cpu --seed 1337 --out assets/checkpoints/small.safetensors",
        checkpoint!("../../assets/checkpoints/small.safetensors"),
    ),
];

/// A shipped checkpoint's bytes by name (none in the browser build).
pub fn shipped(name: &str) -> Option<&'static [u8]> {
    SHIPPED
        .iter()
        .find(|(n, _, b)| *n == name && !b.is_empty())
        .map(|(_, _, b)| *b)
}
