//! # TinyGPT Explainer
//!
//! A byte-level GPT that trains for real and shows its own computation. The
//! crate is in layers (docs/architecture.md; `tests/architecture.rs` checks
//! that a file imports only its own layer or a lower one), in data-flow
//! order:
//!
//! 1. Data and the shared parts: [`data`] (the byte tokenizer, corpora,
//!    the 90/10 split, the seeded portable batch sampler, the toy tasks'
//!    text), [`output`] (the one rule for every file the program writes),
//!    [`i18n`], [`chart`] (charts as SVG and CSV).
//! 2. The model: [`model`] (configuration and RON presets, parameter init,
//!    checkpoints, the gallery's list) and [`program`] (one training step as
//!    an ordered list of ops over named tensors; every backend and viewer
//!    runs this).
//! 3. The backend interface: [`backend`] (the trait), [`probe`] (a look
//!    inside one forward pass), [`sample`] (text generation from any
//!    next-token source), [`readback`], [`flash::format`].
//! 4. The backends: [`cpu`] (the reference, rayon-parallel, f32 or f64),
//!    [`gpu`] (the same program as WGSL compute shaders on any wgpu device),
//!    [`backends`] (choosing one for a run).
//! 5. Training: [`train`] (the trainer and learning-rate schedules),
//!    [`stepthrough`] (one step entry by entry).
//! 6. The analyses: [`flow`] (one prompt's forward and backward pass),
//!    [`worked`], [`interventions`] (knockouts, patching, attribution),
//!    [`flash`] (FlashAttention's tiling traced), [`bench`],
//!    [`correctness`].
//! 7. The catalogue: [`cards`] (the gallery's cards and task scores),
//!    [`lesson`], [`handout`].
//! 8. The class session: [`class`] (a live class: its protocol, its state
//!    and log, and natively its server, `tinygpt class`).
//! 9. The front ends: the command line (`src/cli`, the binary), `app`
//!    (feature `app`): the Bevy explainer, which mirrors the program as
//!    entities and trains inside its frame loop, and `web_trainer`
//!    (feature `worker`, wasm32 with threads): the browser's CPU trainer in
//!    a Web Worker, which the app hands its run to.

#[cfg(feature = "app")]
pub mod app;
pub mod backend;
pub mod backends;
pub mod bench;
pub mod cards;
pub mod chart;
pub mod class;
pub mod correctness;
pub mod cpu;
pub mod data;
pub mod flash;
pub mod flow;
pub mod gpu;
pub mod handout;
pub mod i18n;
pub mod interventions;
pub mod lesson;
pub mod model;
pub mod output;
pub mod probe;
pub mod program;
pub mod readback;
pub mod sample;
pub mod stepthrough;
pub mod train;
#[cfg(all(feature = "worker", target_arch = "wasm32"))]
pub mod web_trainer;
pub mod worked;
