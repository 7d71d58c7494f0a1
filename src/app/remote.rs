//! The browser's CPU trainer in a Web Worker (issue 55): where the page is
//! cross-origin isolated, a CPU run trains in `web/trainer-worker.js` on
//! the crate's threaded core ([`crate::web_trainer`]) instead of on the
//! page's one thread, which draws meanwhile. A browser forbids the page's
//! thread to wait on another, so the app cannot drive a thread pool
//! itself; it hands the run over and asks. This is the page's end of the
//! messages (through `window.tinygptHost`, web/index.html); the engine
//! ([`super::engine`]) decides when the run goes and when it comes back.
//! Natively there is no worker: [`TrainerLink::open`] is None.

use crate::train::remote::StepsDone;

/// The page's link to its trainer worker.
pub struct TrainerLink {
    /// Threads the worker trains on.
    pub threads: u32,
}

/// What the worker said.
#[derive(Debug)]
pub enum Reply {
    /// Its thread pool is up.
    Ready,
    /// It holds the run, at this step.
    Started(u64),
    Steps(StepsDone),
    /// The values of the tensors read, one after another.
    Read(Vec<f32>),
    /// The run handed back: a checkpoint with AdamW's moments.
    Checkpoint(Vec<u8>),
    /// A message failed (why): the worker is not to be trusted with the run.
    Failed(String),
}

// Natively nothing replies (tests read replies all the same).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
#[derive(serde::Deserialize)]
struct Header {
    kind: String,
    #[serde(default)]
    ron: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    step: u64,
}

impl TrainerLink {
    /// The page's worker, when the page can run one (cross-origin isolated,
    /// two cores or more); `threads=N` in the page's query asks for N.
    pub fn open() -> Option<Self> {
        #[cfg(target_arch = "wasm32")]
        {
            let threads = super::browser::trainer_threads();
            (threads > 0).then_some(TrainerLink { threads })
        }
        #[cfg(not(target_arch = "wasm32"))]
        None
    }

    /// Hands the run over (the checkpoint's bytes, with moments) with the
    /// corpus it trains on.
    pub fn start(&self, checkpoint: &[u8], corpus: &crate::data::Corpus) {
        #[cfg(target_arch = "wasm32")]
        super::browser::trainer_start(
            checkpoint,
            &corpus.name,
            &corpus.train,
            &corpus.val,
            corpus.align as u32,
        );
        #[cfg(not(target_arch = "wasm32"))]
        let _ = (checkpoint, corpus);
    }

    pub fn steps(&self, steps: u64, budget_ms: f64) {
        let steps = steps.min(u32::MAX as u64) as u32;
        #[cfg(target_arch = "wasm32")]
        super::browser::trainer_steps(steps, budget_ms);
        #[cfg(not(target_arch = "wasm32"))]
        let _ = (steps, budget_ms);
    }

    pub fn read(&self, names: &[String]) {
        let json = serde_json::to_string(names).unwrap_or_else(|_| "[]".into());
        #[cfg(target_arch = "wasm32")]
        super::browser::trainer_read(&json);
        #[cfg(not(target_arch = "wasm32"))]
        let _ = json;
    }

    pub fn recall(&self) {
        #[cfg(target_arch = "wasm32")]
        super::browser::trainer_recall();
    }

    /// The worker's next reply, if one has come.
    pub fn take(&self) -> Option<Reply> {
        #[cfg(target_arch = "wasm32")]
        {
            let text = super::browser::trainer_take()?;
            Some(parse(&text, super::browser::trainer_take_bytes, super::browser::trainer_take_floats))
        }
        #[cfg(not(target_arch = "wasm32"))]
        None
    }
}

/// A reply from its header (JSON) and, for the kinds that carry them, its
/// bytes or values (taken only for those).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn parse(text: &str, bytes: impl FnOnce() -> Vec<u8>, floats: impl FnOnce() -> Vec<f32>) -> Reply {
    let header: Header = match serde_json::from_str(text) {
        Ok(h) => h,
        Err(e) => return Reply::Failed(format!("an unreadable reply ({e})")),
    };
    match header.kind.as_str() {
        "ready" => Reply::Ready,
        "started" => Reply::Started(header.step),
        "steps" => match StepsDone::from_ron(&header.ron) {
            Ok(done) => Reply::Steps(done),
            Err(e) => Reply::Failed(e),
        },
        "read" => Reply::Read(floats()),
        "checkpoint" => Reply::Checkpoint(bytes()),
        "error" => Reply::Failed(header.message),
        other => Reply::Failed(format!("a reply of an unknown kind `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_by_their_kind_and_bad_ones_are_failures() {
        let none = || -> Vec<u8> { panic!("no bytes for this kind") };
        let nofl = || -> Vec<f32> { panic!("no values for this kind") };
        assert!(matches!(parse(r#"{"kind":"ready"}"#, none, nofl), Reply::Ready));
        assert!(matches!(parse(r#"{"kind":"started","step":7}"#, none, nofl), Reply::Started(7)));
        let done = StepsDone::default().to_ron();
        let steps = serde_json::json!({"kind": "steps", "ron": done}).to_string();
        assert!(matches!(parse(&steps, none, nofl), Reply::Steps(d) if d == StepsDone::default()));
        assert!(matches!(parse(r#"{"kind":"read"}"#, none, || vec![1.0]), Reply::Read(v) if v == [1.0]));
        assert!(matches!(parse(r#"{"kind":"checkpoint"}"#, || vec![3], nofl), Reply::Checkpoint(b) if b == [3]));
        assert!(matches!(parse(r#"{"kind":"error","message":"x"}"#, none, nofl), Reply::Failed(m) if m == "x"));
        assert!(matches!(parse(r#"{"kind":"steps","ron":"(("}"#, none, nofl), Reply::Failed(_)));
        assert!(matches!(parse("not json", none, nofl), Reply::Failed(_)));
        assert!(matches!(parse(r#"{"kind":"what"}"#, none, nofl), Reply::Failed(_)));
    }
}
