//! The `tinygpt` command line: train, generate, list presets, benchmark and
//! export, headless. (The explainer app will be its default once it lands.)

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
