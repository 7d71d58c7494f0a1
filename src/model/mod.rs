//! The model: its configuration and presets, parameter initialisation,
//! checkpoints and the time-lapse they carry.

pub mod checkpoint;
pub mod config;
pub mod gallery;
pub mod int4;
pub mod lora;
pub mod original;
pub mod params;
pub mod shipped;
pub mod timelapse;
