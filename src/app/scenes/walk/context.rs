//! What the flat view of one position read beside the picture, for the
//! beat in view, at the prompt's last byte: the logit lens (what the model
//! would predict if it stopped at that point of the stream: ln_f and the
//! tied head on the stream there) and the head view (where each head of
//! the block looks from that byte). Both are read from the pass the
//! picture draws ([`crate::flow::FlowAll`]'s `lens` and `attention`), so
//! they are the program's numbers; the narration prints them and the
//! headless report lists them.

use super::layout::{Beat, OpKind, TourPass};
use crate::flow::{FlowAll, Guess};
use serde::Serialize;

/// The guesses the lens shows at one point.
pub const LENS_GUESSES: usize = 3;

/// One point of the stream the lens reads: `point` k is the stream
/// entering block k (k < L) or leaving the last block (k = L).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LensPoint {
    pub point: usize,
    pub guesses: Vec<Guess>,
}

/// Where one head looks from the last byte: the key it weights most.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeadLook {
    pub head: usize,
    /// The key's position and byte, and its weight in P.
    pub position: usize,
    pub byte: u8,
    pub weight: f32,
}

/// The beat's reads at the last byte.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BeatReads {
    /// The position read (the prompt's last).
    pub position: usize,
    /// The block whose entry and exit the lens reads (None: the
    /// embedding's one point, or every point).
    pub block: Option<usize>,
    pub lens: Vec<LensPoint>,
    pub heads: Vec<HeadLook>,
}

/// The reads of `beat`: in a block's residual adds (where the stream is
/// written), the lens entering and leaving the block; in its attention
/// beat, every head's look; in the embedding's, the lens on the stream it
/// starts; in the overview and the head's beats, the lens at every point,
/// the stream's whole story. The other ops' beats read nothing (their
/// narration is their worked example). The
/// backward beats and AdamW's read nothing: their numbers are gradients
/// and updates.
pub fn context(flow: &FlowAll, beat: &Beat) -> BeatReads {
    let Some(position) = flow.tokens.len().checked_sub(1) else {
        return BeatReads::default();
    };
    if beat.pass != TourPass::Forward {
        return BeatReads { position, ..BeatReads::default() };
    }
    let points = flow.lens.len();
    let lens_at = |k: usize| {
        flow.lens.get(k)?.get(position).map(|g| LensPoint {
            point: k,
            guesses: g.iter().take(LENS_GUESSES).copied().collect(),
        })
    };
    let block = beat.layer.filter(|_| beat.kind == OpKind::Residual);
    let wanted: Vec<usize> = match (beat.kind, block) {
        (OpKind::Embedding, _) => vec![0],
        (OpKind::Residual, Some(l)) => vec![l, l + 1],
        (OpKind::Overview | OpKind::FinalNorm | OpKind::Logits | OpKind::Loss, _) => (0..points).collect(),
        _ => Vec::new(),
    };
    let lens = wanted.into_iter().filter_map(lens_at).collect();
    let heads = match (beat.kind, beat.layer) {
        (OpKind::Attention, Some(l)) => flow
            .attention
            .get(l)
            .map(|heads| {
                heads
                    .iter()
                    .enumerate()
                    .filter_map(|(head, rows)| {
                        let row = rows.get(position)?;
                        let (key, &weight) = row
                            .iter()
                            .enumerate()
                            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))?;
                        Some(HeadLook {
                            head,
                            position: key,
                            byte: flow.tokens[key],
                            weight,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    BeatReads { position, block, lens, heads }
}

/// A guess as the narration writes it: the byte and its probability.
fn guess(g: &Guess) -> String {
    crate::app::access::describe::guesses(std::slice::from_ref(g), 1)
}

/// The lens line of the narration (None: nothing read).
pub fn lens_line(flow: &FlowAll, c: &BeatReads) -> Option<String> {
    let byte = crate::app::canvas::chip_text(*flow.tokens.get(c.position)?);
    let last = flow.lens.len().checked_sub(1)?;
    let guesses = |p: &LensPoint| p.guesses.iter().map(guess).collect::<Vec<_>>().join(" · ");
    match (c.lens.as_slice(), c.block) {
        ([], _) => None,
        ([before, after], Some(_)) => Some(crate::t!(
            "walk-lens",
            byte = byte,
            layer = before.point as i64,
            before = guesses(before),
            after = guesses(after),
        )),
        ([only], _) => Some(crate::t!("walk-lens-start", byte = byte, guesses = guesses(only))),
        (all, _) => {
            let points = all
                .iter()
                .map(|p| {
                    let place = crate::app::access::describe::lens_place(p.point, last);
                    format!("{place}: {}", p.guesses.first().map(guess).unwrap_or_default())
                })
                .collect::<Vec<_>>()
                .join("  →  ");
            Some(crate::t!("walk-lens-all", byte = byte, points = points))
        }
    }
}

/// The head-view line of the narration (None: not an attention beat).
pub fn heads_line(flow: &FlowAll, c: &BeatReads) -> Option<String> {
    if c.heads.is_empty() {
        return None;
    }
    let byte = crate::app::canvas::chip_text(*flow.tokens.get(c.position)?);
    let heads = c
        .heads
        .iter()
        .map(|h| {
            format!(
                "{} → “{}” @{} {:.0}%",
                crate::t!("head-n", head = h.head as i64),
                crate::app::canvas::chip_text(h.byte),
                h.position,
                h.weight * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(" · ");
    Some(crate::t!("walk-heads", byte = byte, heads = heads))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::FlowAll;

    fn flow() -> FlowAll {
        let g = |byte: u8, p: f32| Guess { byte, p };
        FlowAll {
            tokens: b"abc".to_vec(),
            residual: Vec::new(),
            probs: Vec::new(),
            // Two blocks: three points, three positions each.
            lens: (0..3)
                .map(|k| (0..3).map(|_| vec![g(b'x' + k as u8, 0.5), g(b'y', 0.2), g(b'z', 0.1), g(b'w', 0.05)]).collect())
                .collect(),
            attention: vec![
                vec![
                    vec![vec![1.0], vec![0.4, 0.6], vec![0.7, 0.2, 0.1]],
                    vec![vec![1.0], vec![0.5, 0.5], vec![0.1, 0.3, 0.6]],
                ];
                2
            ],
            nodes: Vec::new(),
            stats: Vec::new(),
            backward: None,
        }
    }

    fn beat(kind: OpKind, pass: TourPass, layer: Option<usize>) -> Beat {
        Beat { kind, pass, node: None, layer, slabs: Vec::new() }
    }

    #[test]
    fn a_residual_add_reads_the_lens_around_its_block_and_attention_every_head() {
        let f = flow();
        let c = context(&f, &beat(OpKind::Residual, TourPass::Forward, Some(1)));
        assert_eq!(c.position, 2);
        assert_eq!(c.lens.iter().map(|p| p.point).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(c.lens[0].guesses, f.lens[1][2][..LENS_GUESSES].to_vec());
        assert!(c.heads.is_empty());
        let c = context(&f, &beat(OpKind::Attention, TourPass::Forward, Some(1)));
        assert!(c.lens.is_empty());
        let looks: Vec<_> = c.heads.iter().map(|h| (h.head, h.position, h.byte)).collect();
        assert_eq!(looks, vec![(0, 0, b'a'), (1, 2, b'c')]);
        assert_eq!(c.heads[1].weight, 0.6);
        // A matmul: neither.
        let c = context(&f, &beat(OpKind::Fc, TourPass::Forward, Some(0)));
        assert!(c.heads.is_empty() && c.lens.is_empty());
    }

    #[test]
    fn the_overview_reads_every_point_and_the_backward_pass_none() {
        let f = flow();
        let c = context(&f, &beat(OpKind::Overview, TourPass::Forward, None));
        assert_eq!(c.lens.len(), 3);
        assert!(lens_line(&f, &c).is_some());
        let c = context(&f, &beat(OpKind::Embedding, TourPass::Forward, None));
        assert_eq!(c.lens.iter().map(|p| p.point).collect::<Vec<_>>(), vec![0]);
        let c = context(&f, &beat(OpKind::Attention, TourPass::Backward, Some(0)));
        assert!(c.lens.is_empty() && c.heads.is_empty());
        assert!(lens_line(&f, &c).is_none() && heads_line(&f, &c).is_none());
    }
}
