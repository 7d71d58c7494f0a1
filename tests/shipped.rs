//! The shipped checkpoints (`assets/checkpoints/`) are what their commands
//! make: tiny's command, run here, reproduces its weights bit for bit.

mod common;

/// The model's tensors of a safetensors file by name, as raw bytes (not
/// the time-lapse's maps and weights: a run records them now, and the
/// checkpoints shipped before it have none).
fn tensors(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let mut out: Vec<(String, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| {
            ![tinygpt::model::checkpoint::TIMELAPSE_MAPS, tinygpt::model::checkpoint::TIMELAPSE_WEIGHTS]
                .contains(&name.as_str())
        })
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

/// The gallery's adder (the quickest of its models to train, 40 s on two
/// cores) is what the command its card gives makes: the training run and
/// the export, each run here with its files moved aside, reproduce the
/// shipped weights bit for bit.
#[test]
fn the_gallery_command_reproduces_the_adder() {
    let entry = tinygpt::model::gallery::find("add").unwrap();
    let dir = common::scratch_dir("gallery-add");
    let moved = |arg: &str| -> String {
        if arg.ends_with(".safetensors") {
            let name = std::path::Path::new(arg).file_name().unwrap();
            dir.join(name).display().to_string()
        } else {
            arg.to_string()
        }
    };
    let mut made = None;
    for command in entry.command.split(" && ") {
        let args: Vec<String> = command.split_whitespace().skip(1).map(moved).collect();
        common::tinygpt(&args);
        let at = args.iter().position(|a| a == "--out").unwrap();
        made = Some(std::fs::read(&args[at + 1]).unwrap());
    }
    let (made, kept) = (tensors(&made.unwrap()), tensors(entry.bytes));
    assert_eq!(made.len(), kept.len());
    for ((a, x), (b, y)) in made.iter().zip(&kept) {
        assert_eq!(a, b);
        assert!(x == y, "{a} differs from the gallery's add");
    }
}
