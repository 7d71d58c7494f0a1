//! # TinyGPT Explainer
//!
//! A byte-level GPT that trains for real and shows its own computation. The
//! crate is laid out in data-flow order:
//!
//! 1. [`data`]: the byte tokenizer, corpora, the 90/10 split and the seeded,
//!    portable batch sampler.
//! 2. [`model`]: the configuration and RON presets, parameter init, checkpoints.
//! 3. [`program`]: one training step as an ordered list of ops over named
//!    tensors, built from a config; every backend and viewer runs this.
//! 4. [`backend`] and [`cpu`]: the backend interface and the CPU reference
//!    backend (rayon-parallel, f32 or f64); [`gpu`]: the same program as
//!    WGSL compute shaders on any wgpu device.
//!    [`flow`]: one prompt's forward pass read at one position (the
//!    residual stream, every activation, the logit lens); [`worked`]: one
//!    output of an op worked out by hand from what the flow read;
//!    [`interventions`]: taking the model apart (knockouts, patching,
//!    attribution).
//!    [`probe`]: a look inside one forward pass (attention weights, logits),
//!    on either backend. [`stepthrough`]: one training step entry by
//!    entry, with the tensors each entry reads and writes.
//! 5. [`train`]: the trainer, learning-rate schedules and text generation.
//!    [`output`]: the one rule for every file the program writes.
//! 6. [`bench`]: the training-speed benchmark; [`chart`]: charts the app
//!    draws, as SVG and CSV files.
//! 7. `app` (feature `app`): the Bevy explainer, which mirrors the program
//!    as entities and trains inside its frame loop.

#[cfg(feature = "app")]
pub mod app;
pub mod backend;
pub mod bench;
pub mod chart;
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
pub mod stepthrough;
pub mod train;
pub mod worked;
