//! The shipped checkpoints (`assets/checkpoints/`) are what their commands
//! make: tiny's command, run here, reproduces its weights bit for bit.

mod common;

/// Tensors of a safetensors file by name, as raw bytes.
fn tensors(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let mut out: Vec<(String, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, view.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn the_readme_command_reproduces_the_shipped_tiny_checkpoint() {
    let (name, command, shipped) = tinygpt::model::shipped::SHIPPED[0];
    assert_eq!(name, "tiny");
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains(command),
        "the README gives the command: {command}"
    );
    let dir = common::scratch_dir("shipped");
    let out = dir.join("tiny.safetensors");
    // The command as the README gives it, with the output moved aside.
    let mut args: Vec<String> = command
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    let at = args.iter().position(|a| a == "--out").unwrap();
    args[at + 1] = out.display().to_string();
    common::tinygpt(&args);
    let made = tensors(&std::fs::read(&out).unwrap());
    let kept = tensors(shipped);
    assert_eq!(made.len(), kept.len());
    for ((a, x), (b, y)) in made.iter().zip(&kept) {
        assert_eq!(a, b);
        assert!(x == y, "{a} differs from the shipped checkpoint");
    }
}

/// Every shipped checkpoint loads and names its preset.
#[test]
fn every_shipped_checkpoint_loads() {
    for (name, _, bytes) in tinygpt::model::shipped::SHIPPED {
        let ckpt = tinygpt::model::checkpoint::Checkpoint::from_bytes(bytes, name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let preset = tinygpt::model::config::Config::load(name).unwrap();
        assert_eq!(ckpt.config.param_count(), preset.param_count(), "{name}");
    }
}
