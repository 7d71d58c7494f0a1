//! The `tinygpt` command line: train, generate, list presets, benchmark and
//! export, headless; with the `app` feature, `tinygpt` alone opens the explainer.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

/// In the browser: the explainer in the page's canvas (see web/README.md).
#[cfg(all(target_arch = "wasm32", feature = "app"))]
fn main() {
    tinygpt::app::web::main();
}

#[cfg(all(target_arch = "wasm32", not(feature = "app")))]
fn main() {}
