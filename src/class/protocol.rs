//! The class's messages: JSON text over one WebSocket per page, tagged by
//! `type`. [`ToServer`] is what a page sends, [`ToClient`] what it gets.
//! Everything a page sends is bounded here: a message is at most
//! [`MAX_MESSAGE_BYTES`], a nickname [`MAX_NICKNAME_CHARS`] printable
//! characters, a join code [`CODE_LEN`] letters of [`CODE_ALPHABET`]; the
//! server refuses anything else with the reason, and never panics on it.

use super::experiment::{ExperimentBoard, Point, ClassSweep};
use serde::{Deserialize, Serialize};

/// The most bytes one message from a page may have.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// The longest nickname, in characters.
pub const MAX_NICKNAME_CHARS: usize = 24;
/// A join code's length.
pub const CODE_LEN: usize = 6;
/// A join code's letters: no 0/O, 1/I/L, so it reads off a projector.
pub const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// The longest prompt the teacher's "send my view" carries, in bytes.
pub const MAX_PROMPT_BYTES: usize = 256;
/// The path of the class's WebSocket on the server.
pub const SOCKET_PATH: &str = "/class/ws";

/// A student's join number (1, 2, …), shown on the dashboard instead of a name.
pub type StudentId = u32;

/// A student's seat: the join number and the secret the server gave with
/// it, so a page that reloads (or loses its Wi-Fi) rejoins as itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seat {
    pub id: StudentId,
    pub key: String,
}

/// The teacher's "send my view": the scene, and where the scene has them
/// the prompt, the attention head (0-based layer and head) and the
/// position it points at. Checked against the class's lesson by the server
/// ([`crate::class::session::Session::check_view`]) and again by each page
/// against its own model before it is shown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedView {
    /// A scene's key (`attention`, `walk`, …).
    pub scene: String,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub head: Option<(usize, usize)>,
    #[serde(default)]
    pub position: Option<usize>,
}

/// Who a page is in the class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Student,
    Teacher,
}

/// What a page sends. The first message names who it is (`join` or
/// `teach`); the teacher's commands need the teacher's token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToServer {
    /// A student joins with the class's code (and a nickname if they like),
    /// or rejoins in their seat.
    Join {
        code: String,
        #[serde(default)]
        nickname: Option<String>,
        #[serde(default)]
        seat: Option<Seat>,
    },
    /// The teacher's page, with the token `tinygpt class` printed.
    Teach { token: String },
    /// The step a student is on (0-based).
    At { step: usize },
    /// A student's answer to the question of a step.
    Choose { step: usize, choice: usize },
    /// Teacher: show the class this step.
    Goto { step: usize },
    /// Teacher: students may not go past the teacher's step (or may).
    Pace { locked: bool },
    /// Teacher: dim every student's screen (or not).
    Pause { paused: bool },
    /// Teacher: show the class the answers to this step's question.
    ShowAnswers { step: usize },
    /// Teacher: every student's view becomes the teacher's.
    View { view: SharedView },
    /// Teacher: the anonymous answers as CSV.
    Csv,
    /// Teacher: start the class experiment with this sweep (a new sweep
    /// starts it again), or end it.
    Experiment { sweep: Option<ClassSweep> },
    /// A student's prediction, before their run: per value of the sweep,
    /// whether its run will diverge.
    Predict { diverges: Vec<bool> },
    /// Points of a student's loss curve (rising steps; the first at or
    /// before the last sent starts the curve again).
    Curve { points: Vec<Point> },
    /// Teacher: end the class (its file is deleted).
    End,
}

/// The class as every page sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassState {
    /// The teacher's step (0-based).
    pub step: usize,
    pub paused: bool,
    /// Students may not go past `step`.
    pub locked: bool,
    /// The questions the teacher has revealed, with the class's answers.
    pub reveals: Vec<Reveal>,
}

/// A revealed question: the right choice and how many chose each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reveal {
    pub step: usize,
    pub answer: usize,
    pub counts: Vec<u32>,
}

/// One student on the teacher's dashboard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudentRow {
    pub id: StudentId,
    pub nickname: Option<String>,
    /// The step they are on.
    pub step: usize,
    /// Their page is connected now.
    pub online: bool,
    /// How many questions they have answered.
    pub answered: usize,
}

/// The answers to one step's question so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub step: usize,
    /// How many chose each choice.
    pub counts: Vec<u32>,
}

/// What the teacher's dashboard shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    pub students: Vec<StudentRow>,
    pub tallies: Vec<Tally>,
    /// The class experiment, while there is one.
    #[serde(default)]
    pub experiment: Option<ExperimentBoard>,
}

/// A student's part in the class experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub sweep: ClassSweep,
    /// The value (an index into the sweep's values) this student trains with.
    pub value: usize,
    /// Their prediction on record, if they made it.
    pub predicted: Option<Vec<bool>>,
    /// The last step of their curve on record (a page back after a reload
    /// starts its run again).
    pub reported_to: Option<u32>,
}

impl Dashboard {
    /// The tally of a step's question, if it has one.
    pub fn tally(&self, step: usize) -> Option<&Tally> {
        self.tallies.iter().find(|t| t.step == step)
    }
}

/// What a page gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToClient {
    /// Admitted: the lesson (a built-in name), the code, the seat (a
    /// student's; keep it to rejoin) and the answers already on record.
    Welcome {
        role: Role,
        lesson: String,
        code: String,
        #[serde(default)]
        seat: Option<Seat>,
        #[serde(default)]
        answers: Vec<(usize, usize)>,
    },
    /// The class now (after every change the teacher makes).
    Class { state: ClassState },
    /// A student's answer is saved on the teacher's machine.
    Accepted { step: usize, choice: usize },
    /// Teacher: the students and the answers so far.
    Dashboard { board: Dashboard },
    /// The teacher's view, to show.
    View { view: SharedView },
    /// Teacher: the answers as CSV.
    Csv { text: String },
    /// A student: their part in the class experiment (None: there is none
    /// now).
    Assigned { assignment: Option<Assignment> },
    /// Teacher: points of a student's curve, with the value they train
    /// with; `restart`: the curve starts again with these.
    Curve {
        /// The experiment's round ([`ExperimentBoard::round`]).
        round: u32,
        id: StudentId,
        value: usize,
        points: Vec<Point>,
        restart: bool,
    },
    /// A message was refused: why (the page stays connected).
    Refused { reason: String },
    /// The server is closing this page's connection: why, and whether
    /// trying again can help (a dropped hello, a flood) or not (a wrong
    /// code or teacher link, a full class).
    Shut { reason: String, retry: bool },
    /// The teacher ended the class.
    Ended,
}

impl ToServer {
    /// Reads one message from a page: its size first, then its JSON.
    pub fn parse(text: &str) -> Result<ToServer, String> {
        if text.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "a message of {} bytes is over the {MAX_MESSAGE_BYTES}-byte limit",
                text.len()
            ));
        }
        serde_json::from_str(text).map_err(|e| {
            let mut e = e.to_string();
            e.truncate(160);
            format!("not a message of the class protocol ({e})")
        })
    }

    /// Whether only the teacher may send it.
    pub fn is_teachers(&self) -> bool {
        matches!(
            self,
            ToServer::Goto { .. }
                | ToServer::Pace { .. }
                | ToServer::Pause { .. }
                | ToServer::ShowAnswers { .. }
                | ToServer::View { .. }
                | ToServer::Csv
                | ToServer::Experiment { .. }
                | ToServer::End
        )
    }

    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a message serialises")
    }
}

impl ToClient {
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a message serialises")
    }

    pub fn parse(text: &str) -> Result<ToClient, String> {
        serde_json::from_str(text).map_err(|e| format!("the class server sent what this app cannot read ({e})"))
    }
}

/// A join code as typed (any case, spaces around), or why it is not one.
pub fn normalize_code(typed: &str) -> Result<String, String> {
    let code: String = typed.trim().to_ascii_uppercase();
    if code.len() == CODE_LEN && code.bytes().all(|b| CODE_ALPHABET.contains(&b)) {
        Ok(code)
    } else {
        Err(format!(
            "`{}` is not a class code: a code is {CODE_LEN} letters and digits, as the teacher's screen shows",
            typed.chars().take(16).collect::<String>()
        ))
    }
}

/// A nickname as typed: trimmed, none if empty, refused if too long or
/// holding control characters.
pub fn check_nickname(typed: Option<&str>) -> Result<Option<String>, String> {
    let Some(name) = typed.map(str::trim).filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    if name.chars().count() > MAX_NICKNAME_CHARS {
        return Err(format!(
            "a nickname has at most {MAX_NICKNAME_CHARS} characters; choose a shorter one"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("a nickname cannot hold control characters".into());
    }
    Ok(Some(name.to_string()))
}

/// A random join code from 6 bytes of randomness (the caller's source).
pub fn code_from(random: [u8; CODE_LEN]) -> String {
    random
        .iter()
        .map(|b| CODE_ALPHABET[*b as usize % CODE_ALPHABET.len()] as char)
        .collect()
}

/// A code with a gap in the middle, for reading aloud or off a
/// projector: `K7Q 2XM`.
pub fn spaced_code(code: &str) -> String {
    let (a, b) = code.split_at(code.len() / 2);
    format!("{a} {b}")
}

/// Bytes as lowercase hex (tokens and seat keys).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_unknown_fields_are_refused() {
        let m = ToServer::Choose { step: 3, choice: 1 };
        assert_eq!(ToServer::parse(&m.to_text()), Ok(m));
        assert!(ToServer::parse(r#"{"type":"choose","step":3,"choice":1,"extra":0}"#).is_err());
        assert!(ToServer::parse(r#"{"type":"launch"}"#).is_err());
        assert!(ToServer::parse(&"x".repeat(MAX_MESSAGE_BYTES + 1)).is_err());
        let view = SharedView {
            scene: "attention".into(),
            prompt: Some("to be or not".into()),
            head: Some((1, 2)),
            position: Some(4),
        };
        let m = ToServer::View { view: view.clone() };
        assert_eq!(ToServer::parse(&m.to_text()), Ok(m));
        let m = ToClient::View { view };
        assert_eq!(ToClient::parse(&m.to_text()), Ok(m));
        // The scene alone (the other parts default), and nothing unknown.
        assert_eq!(
            ToServer::parse(r#"{"type":"view","view":{"scene":"walk"}}"#),
            Ok(ToServer::View { view: SharedView { scene: "walk".into(), ..Default::default() } })
        );
        assert!(ToServer::parse(r#"{"type":"view","view":{"scene":"walk","layer":1}}"#).is_err());
    }

    #[test]
    fn codes_and_nicknames() {
        assert_eq!(normalize_code(" k7q2xm "), Ok("K7Q2XM".into()));
        assert!(normalize_code("K7Q2X0").is_err());
        assert!(normalize_code("K7Q2").is_err());
        assert_eq!(check_nickname(Some("  ")), Ok(None));
        assert_eq!(check_nickname(Some(" Ana ")), Ok(Some("Ana".into())));
        assert!(check_nickname(Some(&"a".repeat(25))).is_err());
        assert!(check_nickname(Some("a\u{7}b")).is_err());
        let code = code_from([0, 30, 31, 255, 7, 100]);
        assert_eq!(normalize_code(&code), Ok(code));
    }
}
