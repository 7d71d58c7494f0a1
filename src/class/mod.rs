//! A live class (issue 57): a teacher paces one lesson and every student's
//! page follows; the class's answers to each predict-then-reveal question
//! come in live on the teacher's dashboard, hidden from the students until
//! the teacher reveals them.
//!
//! - [`experiment`]: the class experiment's rules (a sweep of learning
//!   rates or seeds across the class, predictions, loss curves).
//! - [`protocol`]: the messages, as JSON over a WebSocket, and their bounds
//!   (size, nicknames, codes); the app's client and the server share it.
//! - [`session`]: the class itself as a state machine (who joined, where the
//!   teacher is, the answers, what is revealed) fed by the records it also
//!   writes to its log, so replaying the log rebuilds it.
//! - [`log`] (natively): the session's append-only file, written before an
//!   answer is acknowledged, so a restarted server resumes the class.
//! - [`server`] (natively): `tinygpt class`, HTTP and WebSockets with axum:
//!   the web build, the join page, the socket.
//! - [`tls`] (natively): `--tls CERT KEY`, the same over https and wss.

pub mod experiment;
pub mod protocol;
pub mod session;

#[cfg(not(target_arch = "wasm32"))]
pub mod log;
#[cfg(not(target_arch = "wasm32"))]
pub mod server;
#[cfg(not(target_arch = "wasm32"))]
pub mod tls;
