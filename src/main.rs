//! The `tinygpt` command line: train, generate, list presets, benchmark and
//! export, headless; with the `app` feature, `tinygpt` alone opens the explainer.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
