//! Which kernels ran a beat's op in the run's training step (the GPU's
//! plan, as the Step scene lists them), so that the narration can say, in
//! a mixed-precision run, which products ran in f16 on the tensor cores
//! and which ops stayed in f32. The walk's own numbers are recomputed on
//! the batch-1 program in f32; these are what the training step ran for
//! the same op.

use super::layout::{Beat, TourPass};
use crate::program::{Program, Step};

/// The kernels of the training step's entry for `beat`: the forward or the
/// backward of the op that writes its node, found in `program`'s step list
/// (`entry_kernels` is indexed as that list). Empty where the backend
/// names none (the CPU), for the loss's and AdamW's beats, or where no op
/// writes the node.
pub fn of_beat(program: &Program, entry_kernels: &[Vec<&'static str>], beat: &Beat) -> Vec<&'static str> {
    let Some(id) = beat.node.as_deref().and_then(|node| program.tensor_id(node)) else {
        return Vec::new();
    };
    let Some(op) = program.writer(id) else {
        return Vec::new();
    };
    let entry = match beat.pass {
        TourPass::Forward => Step::Forward(op),
        TourPass::Backward => Step::Backward(op),
        TourPass::Update => return Vec::new(),
    };
    program
        .steps
        .iter()
        .position(|s| *s == entry)
        .and_then(|i| entry_kernels.get(i))
        .cloned()
        .unwrap_or_default()
}

/// The narration's sentence in a mixed-precision run: the beat's kernels
/// that ran on the tensor cores (f16 operands, f32 sums) and those that
/// ran in f32 (a weight gradient whose product the tensor cores would not
/// pay for, the reductions, the bias), or that the op stayed in f32. None
/// in an f32 run or for a beat without kernels.
pub fn sentence(mixed: bool, pass: TourPass, kernels: &[&str]) -> Option<String> {
    if !mixed || kernels.is_empty() {
        return None;
    }
    let pass = if pass == TourPass::Backward { "backward" } else { "forward" };
    let (in_f16, in_f32): (Vec<&str>, Vec<&str>) =
        kernels.iter().copied().partition(|k| crate::gpu::coop::on_tensor_cores(k));
    Some(match (in_f16.is_empty(), in_f32.is_empty()) {
        (true, _) => crate::t!("walk-mixed-f32", pass = pass, kernels = in_f32.join(", ")),
        (false, true) => crate::t!("walk-mixed-f16", pass = pass, kernels = in_f16.join(", ")),
        (false, false) => crate::t!(
            "walk-mixed-f16-and-f32",
            pass = pass,
            kernels = in_f16.join(", "),
            rest = in_f32.join(", "),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::layout::OpKind;

    fn beat(node: Option<&str>, pass: TourPass) -> Beat {
        Beat { kind: OpKind::Qkv, pass, node: node.map(str::to_string), layer: Some(0), slabs: Vec::new() }
    }

    #[test]
    fn a_beat_names_the_kernels_of_its_ops_entry_in_the_training_step() {
        let config = crate::model::config::Config::load("tiny").unwrap();
        let program = Program::new(&config);
        // A plan whose every entry's one kernel is named after the entry.
        let plan: Vec<Vec<&'static str>> =
            program.steps.iter().map(|s| vec![&*Box::leak(format!("{s:?}").into_boxed_str())]).collect();
        let node = "h.0.attn.qkv";
        let id = program.tensor_id(node).expect("the first block's q, k and v");
        let writer = program.writer(id).unwrap();
        assert_eq!(of_beat(&program, &plan, &beat(Some(node), TourPass::Forward)), [format!("Forward({writer})")]);
        assert_eq!(of_beat(&program, &plan, &beat(Some(node), TourPass::Backward)), [format!("Backward({writer})")]);
        assert!(of_beat(&program, &plan, &beat(None, TourPass::Backward)).is_empty(), "the loss's beat");
        assert!(of_beat(&program, &plan, &beat(Some("no such tensor"), TourPass::Forward)).is_empty());
        // The CPU names no kernels.
        assert!(of_beat(&program, &[], &beat(Some(node), TourPass::Forward)).is_empty());
    }

    #[test]
    fn the_sentence_tells_the_tensor_cores_kernels_from_the_f32_ones() {
        let coop = crate::gpu::coop::TRAINING_ENTRIES_VEC4[0];
        let all_f16 = sentence(true, TourPass::Forward, &[coop]).unwrap();
        assert!(all_f16.contains(coop), "{all_f16}");
        // A backward whose weight gradient stayed in f32: both named, apart.
        let both = sentence(true, TourPass::Backward, &[coop, "matmul_tn_w128"]).unwrap();
        let (at_coop, at_f32) = (both.find(coop).unwrap(), both.find("matmul_tn_w128").unwrap());
        assert!(at_coop < at_f32, "{both}");
        assert!(!all_f16.contains("matmul_tn_w128"));
        let stays = sentence(true, TourPass::Backward, &["layernorm_backward"]).unwrap();
        assert!(stays.contains("layernorm_backward") && stays.contains("f32"), "{stays}");
        assert!(![&all_f16, &both].contains(&&stays));
        assert_eq!(sentence(false, TourPass::Forward, &[coop]), None, "an f32 run");
        assert_eq!(sentence(true, TourPass::Forward, &[]), None, "the CPU");
    }
}
